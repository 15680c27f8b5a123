# Sourced by the load scripts: start_server PORT builds and starts the local
# server (embedded durable store, rate limit out of the way) in $tmp, waits
# for it, and exports BRAND, KEY, OFFER and an active PARTNER to load with;
# SERVER_PID is the server's process.
# It trusts loopback as a proxy (clicks name their address in
# X-Forwarded-For); TALLY_PPROF=ADDR serves Go's profiler there,
# TALLY_METRICS=ADDR its Prometheus metrics.
# The caller sets tmp and a trap that kills its jobs.

json() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }

# wait_for ADDR waits until something accepts connections on ADDR.
wait_for() {
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null && return; sleep 0.05; done
  echo "nothing listens on $1" >&2; return 1
}

start_server() {
  local port=$1 base=http://127.0.0.1:$1
  go build -o "$tmp/tally" ./cmd/tally
  TALLY_RATE_LIMIT=1000000000 TALLY_LOG_LEVEL=warn TALLY_TRUSTED_PROXIES=127.0.0.1 \
    "$tmp/tally" serve --addr "127.0.0.1:$port" --data "$tmp/data" ${TALLY_PPROF:+--pprof "$TALLY_PPROF"} ${TALLY_METRICS:+--metrics "$TALLY_METRICS"} 2>"$tmp/serve.log" &
  SERVER_PID=$!
  wait_for "127.0.0.1:$port"
  export BRAND KEY OFFER PARTNER
  BRAND=$("$tmp/tally" brands create --name Load --data "$tmp/data" | json id)
  KEY=$("$tmp/tally" keys create --brand "$BRAND" --data "$tmp/data" | json key)
  OFFER=$(curl -fs "$base/api/v1/offers" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d '{"name":"Load","destinationUrl":"https://shop.example/?c={click_id}","revenueCents":1000,"payoutCents":300,"currency":"USD"}' | json id)
  PARTNER=$(curl -fs "$base/api/public/brands/$BRAND/applications" -H 'Content-Type: application/json' \
    -d '{"name":"Load","email":"load@example.com"}' | json id)
  curl -fs -o /dev/null -X POST "$base/api/v1/partners/$PARTNER/approve" -H "Authorization: Bearer $KEY"
}
