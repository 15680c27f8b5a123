-- POST /api/v1/conversions with a unique externalTxnId per request.
-- KEY, OFFER and PARTNER come from the environment.
local counter = 0
local thread_id = 0
local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  thread_id = tid
end

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("KEY")

function request()
  counter = counter + 1
  local body = string.format('{"offerId":"%s","partnerId":"%s","externalTxnId":"load-%d-%d-%d"}',
    os.getenv("OFFER"), os.getenv("PARTNER"), os.time(), thread_id, counter)
  return wrk.format(nil, "/api/v1/conversions", nil, body)
end

function done(summary, latency, requests)
  io.write(string.format("non-2xx or socket errors: %d\n", summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
