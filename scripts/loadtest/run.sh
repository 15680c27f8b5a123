#!/usr/bin/env bash
# Load test on loopback: the tracking link GET /c/{offerId} and POST
# /api/v1/conversions on the local server (embedded store, fsync on every
# commit), next to a trivial net/http handler, with wrk (Debian package
# `wrk`). Usage: scripts/loadtest/run.sh [duration] [connections]
# It prints one table per run (rate, ratio to the trivial handler measured
# just before, p50, p99, the server's CPU time and bytes written to storage
# per request) and ends by counting what the server stored against what it
# answered. RAW=1 also prints wrk's own output; PORT (default 18180) is the
# server's port, the trivial handler's the next one.
# The webhook pipeline (deliveries per second, POST-to-receiver latency) has
# its own script: scripts/loadtest/webhooks.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
duration=${1:-10s}
conns=${2:-32}
command -v wrk >/dev/null || { echo "install wrk first: apt-get install wrk" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
go build -o "$tmp/trivial" ./scripts/loadtest/trivial
. scripts/loadtest/server.sh
port=${PORT:-18180}
start_server "$port"
"$tmp/trivial" --addr "127.0.0.1:$((port + 1))" &
trivial_pid=$!
wait_for "127.0.0.1:$((port + 1))"


# cpu PID: the process's user and system time so far, in clock ticks.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ticks=$(getconf CLK_TCK)

# written PID: the bytes the process has caused to be written to storage.
written() { awk '$1 == "write_bytes:" {print $2}' "/proc/$1/io"; }

# measure NAME PID URL SCRIPT runs wrk and adds a row of figures to $tmp/rows.
measure() {
  local before after wbefore wafter
  before=$(cpu "$2") wbefore=$(written "$2")
  wrk -t2 -c"$conns" -d"$duration" --latency -s "scripts/loadtest/$4" "$3" >"$tmp/$1.out"
  after=$(cpu "$2") wafter=$(written "$2")
  [ -z "${RAW:-}" ] || cat "$tmp/$1.out"
  echo "$1 $(sed -n 's/^figures: //p' "$tmp/$1.out") $((after - before)) $((wafter - wbefore))" >>"$tmp/rows"
}

echo "$(date -u '+%F %R UTC'), $(nproc) CPUs, load average at start: $(cut -d' ' -f1-3 /proc/loadavg), wrk -t2 -c$conns -d$duration"
# The trivial handler runs right before each path, and each path's ratio is
# to that run: on a shared machine whose load changes from one ten-second
# window to the next, the two rates then come from the same conditions.
measure trivial "$trivial_pid" "http://127.0.0.1:$((port + 1))" conversions.lua
measure clicks "$SERVER_PID" "http://127.0.0.1:$port" clicks.lua
measure trivial "$trivial_pid" "http://127.0.0.1:$((port + 1))" conversions.lua
measure conversions "$SERVER_PID" "http://127.0.0.1:$port" conversions.lua

awk -v ticks="$ticks" '
  BEGIN {
    path["trivial"] = "trivial net/http handler"
    path["clicks"] = "GET /c/{offerId} (302)"
    path["conversions"] = "POST /api/v1/conversions"
    print "| path | rate | / trivial | p50 | p99 | CPU / request | written / request | failed |"
    print "|---|---|---|---|---|---|---|---|"
  }
  {
    rate = $2 / ($3 / 1e6)
    if ($1 == "trivial") base = rate
    printf "| %s | %d/s | %.1f %% | %.1f ms | %.1f ms | %d µs | %.1f KB | %d |\n", path[$1], rate, 100 * rate / base, $4 / 1000, $5 / 1000, $7 * 1e6 / ticks / $2, $8 / 1000 / $2, $6
  }' "$tmp/rows"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

stored() { curl -fs "127.0.0.1:$port/api/v1/reports?groupBy=offer" -H "Authorization: Bearer $KEY" | python3 -c "import json,sys; print(sum(r['$1'] for r in json.load(sys.stdin)['data']))"; }
read -r _ clicks _ _ _ failed _ < <(grep '^clicks ' "$tmp/rows")
read -r _ conversions _ _ _ cfailed _ < <(grep '^conversions ' "$tmp/rows")
echo "clicks answered 302: $((clicks - failed)), stored: $(stored clicks)"
echo "conversions answered 201: $((conversions - cfailed)), stored: $(stored conversions)"
