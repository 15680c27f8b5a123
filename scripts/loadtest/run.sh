#!/usr/bin/env bash
# Load test on loopback: POST /api/v1/conversions on the local server (embedded
# store, fsync on every commit), next to a trivial net/http handler, with wrk
# (Debian package `wrk`). Usage: scripts/loadtest/run.sh [duration] [connections]
# The webhook pipeline (deliveries per second, POST-to-receiver latency) has
# its own script: scripts/loadtest/webhooks.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
duration=${1:-10s}
conns=${2:-32}
command -v wrk >/dev/null || { echo "install wrk first: apt-get install wrk" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
go build -o "$tmp/tally" ./cmd/tally
go build -o "$tmp/trivial" ./scripts/loadtest/trivial

TALLY_RATE_LIMIT=1000000000 TALLY_LOG_LEVEL=warn "$tmp/tally" serve --addr 127.0.0.1:18180 --data "$tmp/data" 2>"$tmp/serve.log" &
"$tmp/trivial" --addr 127.0.0.1:18181 &
for _ in $(seq 50); do curl -fs -o /dev/null 127.0.0.1:18180/ -w '' 2>/dev/null || [ $? -eq 22 ] && break; sleep 0.1; done

json() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
brand=$("$tmp/tally" brands create --name Load --data "$tmp/data" | json id)
export KEY=$("$tmp/tally" keys create --brand "$brand" --data "$tmp/data" | json key)
export OFFER=$(curl -fs 127.0.0.1:18180/api/v1/offers -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -d '{"name":"Load","destinationUrl":"https://shop.example/","revenueCents":1000,"payoutCents":300,"currency":"USD"}' | json id)
export PARTNER=$(curl -fs 127.0.0.1:18180/api/public/brands/$brand/applications -H 'Content-Type: application/json' \
  -d '{"name":"Load","email":"load@example.com"}' | json id)
curl -fs -o /dev/null -X POST 127.0.0.1:18180/api/v1/partners/$PARTNER/approve -H "Authorization: Bearer $KEY"

echo "== trivial net/http handler"
wrk -t2 -c"$conns" -d"$duration" --latency -s scripts/loadtest/conversions.lua http://127.0.0.1:18181
echo "== POST /api/v1/conversions (embedded store, durable)"
wrk -t2 -c"$conns" -d"$duration" --latency -s scripts/loadtest/conversions.lua http://127.0.0.1:18180
echo "== conversions stored: $(curl -fs "127.0.0.1:18180/api/v1/reports?groupBy=offer" -H "Authorization: Bearer $KEY" | python3 -c 'import json,sys; print(sum(r["conversions"] for r in json.load(sys.stdin)["data"]))')"
