-- GET /c/{offer}?pid={partner} as browsers would follow a tracking link:
-- a browser User-Agent, a distinct sub1 per request, and a client address
-- per request in X-Forwarded-For (the server trusts loopback as a proxy),
-- so that clicks come from many addresses as real traffic does.
-- OFFER and PARTNER come from the environment.
dofile("scripts/loadtest/common.lua")
local counter = 0

wrk.headers["User-Agent"] = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"

function request()
  counter = counter + 1
  wrk.headers["X-Forwarded-For"] = string.format("10.%d.%d.%d", thread_id, math.floor(counter / 250) % 250, counter % 250)
  return wrk.format("GET", string.format("/c/%s?pid=%s&sub1=s%d-%d", os.getenv("OFFER"), os.getenv("PARTNER"), thread_id, counter))
end
