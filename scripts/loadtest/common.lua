-- Shared by the wrk scripts (dofile, from the repository root): a thread
-- number per wrk thread, and one line of figures for run.sh.
thread_id = 0
local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  thread_id = tid
end

-- requests, microseconds, p50 and p99 in microseconds, and the requests
-- that failed (a status of 400 or more, or a socket error).
function done(summary, latency, requests)
  io.write(string.format("figures: %d %d %d %d %d\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99),
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
