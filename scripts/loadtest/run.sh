#!/usr/bin/env bash
# Load test on loopback: the tracking link GET /c/{offerId} and POST
# /api/v1/conversions on the local server (embedded store, fsync on every
# commit), next to a trivial net/http handler, with wrk (Debian package
# `wrk`). Usage: scripts/loadtest/run.sh [duration] [connections]
# It ends by counting what the server stored against what it answered.
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
start_server 18180
"$tmp/trivial" --addr 127.0.0.1:18181 &
wait_for 127.0.0.1:18181

echo "== trivial net/http handler"
wrk -t2 -c"$conns" -d"$duration" --latency -s scripts/loadtest/conversions.lua http://127.0.0.1:18181
echo "== GET /c/{offerId} tracking link (embedded store, durable)"
wrk -t2 -c"$conns" -d"$duration" --latency -s scripts/loadtest/clicks.lua http://127.0.0.1:18180 | tee "$tmp/clicks.out"
echo "== POST /api/v1/conversions (embedded store, durable)"
wrk -t2 -c"$conns" -d"$duration" --latency -s scripts/loadtest/conversions.lua http://127.0.0.1:18180
stored() { curl -fs "127.0.0.1:18180/api/v1/reports?groupBy=offer" -H "Authorization: Bearer $KEY" | python3 -c "import json,sys; print(sum(r['$1'] for r in json.load(sys.stdin)['data']))"; }
echo "== clicks answered 302: $(sed -n 's/^answered: \([0-9]*\), of which not 302 or socket errors: \([0-9]*\)$/\1 - \2/p' "$tmp/clicks.out" | bc), clicks stored: $(stored clicks)"
echo "== conversions stored: $(stored conversions)"
