-- POST /api/v1/conversions with a unique externalTxnId per request.
-- KEY, OFFER and PARTNER come from the environment.
dofile("scripts/loadtest/common.lua")
local counter = 0

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("KEY")

function request()
  counter = counter + 1
  local body = string.format('{"offerId":"%s","partnerId":"%s","externalTxnId":"load-%d-%d-%d"}',
    os.getenv("OFFER"), os.getenv("PARTNER"), os.time(), thread_id, counter)
  return wrk.format(nil, "/api/v1/conversions", nil, body)
end
