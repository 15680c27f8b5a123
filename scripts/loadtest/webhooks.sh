#!/usr/bin/env bash
# Webhook pipeline load test on loopback: the local server (embedded store,
# durable pipeline) delivers conversion.created to a receiver that answers
# 200, run by scripts/loadtest/webhooks. It prints the ingest rate, the
# delivery rate and the latency from POST /conversions returning to the
# receiver getting the webhook. run.sh measures the ingest rate alone.
# Usage: scripts/loadtest/webhooks.sh [burst conversions] [connections] [paced conversions] [paced rate/s]
# TALLY_WEBHOOK_WORKERS in the environment is passed to the server.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-5000}
conns=${2:-32}
paced_n=${3:-1000}
paced_rate=${4:-100}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
go build -o "$tmp/tally" ./cmd/tally
go build -o "$tmp/webhooks" ./scripts/loadtest/webhooks

TALLY_RATE_LIMIT=1000000000 TALLY_LOG_LEVEL=warn "$tmp/tally" serve --addr 127.0.0.1:18190 --data "$tmp/data" 2>"$tmp/serve.log" &
for _ in $(seq 50); do curl -fs -o /dev/null 127.0.0.1:18190/ -w '' 2>/dev/null || [ $? -eq 22 ] && break; sleep 0.1; done

json() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
brand=$("$tmp/tally" brands create --name Load --data "$tmp/data" | json id)
export KEY=$("$tmp/tally" keys create --brand "$brand" --data "$tmp/data" | json key)
export OFFER=$(curl -fs 127.0.0.1:18190/api/v1/offers -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -d '{"name":"Load","destinationUrl":"https://shop.example/","revenueCents":1000,"payoutCents":300,"currency":"USD"}' | json id)
export PARTNER=$(curl -fs 127.0.0.1:18190/api/public/brands/$brand/applications -H 'Content-Type: application/json' \
  -d '{"name":"Load","email":"load@example.com"}' | json id)
curl -fs -o /dev/null -X POST 127.0.0.1:18190/api/v1/partners/$PARTNER/approve -H "Authorization: Bearer $KEY"

"$tmp/webhooks" -server http://127.0.0.1:18190 -n "$n" -c "$conns" -paced-n "$paced_n" -paced-rate "$paced_rate"
if grep -q '"level":"ERROR"' "$tmp/serve.log"; then
  echo "== the server logged errors:"; grep '"level":"ERROR"' "$tmp/serve.log" | sort | uniq -c | sort -rn | head -5
fi
