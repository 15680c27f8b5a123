#!/usr/bin/env bash
# Webhook pipeline load test on loopback: the local server (embedded store,
# durable pipeline) delivers conversion.created to a receiver that answers
# 200, run by scripts/loadtest/webhooks. It prints the ingest rate, the
# delivery rate and the latency from POST /conversions returning to the
# receiver getting the webhook, and per phase the server's CPU time and
# bytes written per conversion. run.sh measures the ingest rate alone.
# Usage: scripts/loadtest/webhooks.sh [burst conversions] [connections] [paced conversions] [paced rate/s]
# TALLY_WEBHOOK_WORKERS in the environment is passed to the server; PORT (default 18190) is
# the server's port, TALLY_PPROF=ADDR serves its profiler.
# POSTBACKS=1 also sets the partner's postback to the receiver, so that
# every conversion makes a webhook and a postback (GET), mixed.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-5000}
conns=${2:-32}
paced_n=${3:-1000}
paced_rate=${4:-100}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
go build -o "$tmp/webhooks" ./scripts/loadtest/webhooks
. scripts/loadtest/server.sh
start_server "${PORT:-18190}"

neighbour=()
if [ "${NEIGHBOUR:-1}" != 0 ]; then
  nbrand=$("$tmp/tally" brands create --name Neighbour --data "$tmp/data" | json id)
  neighbour=(-neighbour-brand "$nbrand" -neighbour-key "$("$tmp/tally" keys create --brand "$nbrand" --data "$tmp/data" | json key)")
fi
"$tmp/webhooks" -server "http://127.0.0.1:${PORT:-18190}" -n "$n" -c "$conns" -paced-n "$paced_n" -paced-rate "$paced_rate" \
  -postbacks="${POSTBACKS:-0}" -server-pid "$SERVER_PID" "${neighbour[@]}"
if grep -q '"level":"ERROR"' "$tmp/serve.log"; then
  echo "== the server logged errors:"; grep '"level":"ERROR"' "$tmp/serve.log" | sort | uniq -c | sort -rn | head -5
fi
