#!/usr/bin/env bash
# Fetches, starts and stops Amazon DynamoDB Local for the tests.
#
#   dynamodb-local.sh fetch       put DynamoDB Local in .cache/dynamodb-local
#   dynamodb-local.sh start PORT  run it in memory on 127.0.0.1:PORT
#   dynamodb-local.sh stop [PORT] stop what start started (on PORT, or all)
#
# DynamoDB Local comes from the npm package amplify-dynamodb-simulator, which
# ships it under emulator/: npm is a registry every machine of ours reaches.
set -euo pipefail

# 2.9.30 ships DynamoDB Local 1.25.1. The checksum pins the tarball itself.
SIMULATOR=amplify-dynamodb-simulator@2.9.30
SIMULATOR_SHA256=3503ffac19f183407909fecdacf4db51ab1fdad1da7b2f177016670b2d80e4b9

root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.cache/dynamodb-local

die() {
	echo "dynamodb-local: $*" >&2
	exit 1
}

fetch() {
	[[ -f $dir/DynamoDBLocal.jar ]] && return
	command -v npm >/dev/null || die "npm is needed to fetch DynamoDB Local"
	echo "dynamodb-local: fetching DynamoDB Local from npm ($SIMULATOR, about 65 MB) into .cache/dynamodb-local, once" >&2
	mkdir -p "$root/.cache"
	# Unpack next to the destination, so that the final move is a rename.
	local tmp
	tmp=$(mktemp -d "$dir.XXXXXX")
	# shellcheck disable=SC2064 # expand $tmp now
	trap "rm -rf '$tmp'" EXIT
	if ! (cd "$tmp" && npm pack --silent "$SIMULATOR" >npm.log 2>&1); then
		cat "$tmp/npm.log" >&2
		die "npm pack $SIMULATOR failed"
	fi
	local tgz=("$tmp"/amplify-dynamodb-simulator-*.tgz)
	echo "$SIMULATOR_SHA256  $tgz" | sha256sum --check --status ||
		die "$SIMULATOR does not match its pinned checksum"
	tar -xzf "$tgz" -C "$tmp"
	[[ -f $tmp/package/emulator/DynamoDBLocal.jar ]] || die "$SIMULATOR has no emulator/DynamoDBLocal.jar"
	# Move the directory in whole, so that an interrupted fetch leaves none
	# that the check above would take as complete; a concurrent fetch that
	# finished first wins.
	[[ -f $dir/DynamoDBLocal.jar ]] || rm -rf "$dir"
	mv -T "$tmp/package/emulator" "$dir" 2>/dev/null || [[ -f $dir/DynamoDBLocal.jar ]] ||
		die "could not move DynamoDB Local into $dir"
}

start() {
	local port=${1:?usage: dynamodb-local.sh start PORT}
	[[ $port =~ ^[0-9]+$ ]] || die "bad port: $port"
	local pidfile=$dir/pid.$port log=$dir/server.$port.log
	[[ -f $dir/DynamoDBLocal.jar ]] || die "not fetched: run 'make dynamodb-local' first"
	command -v java >/dev/null || die "java is needed to run DynamoDB Local"
	if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
		die "already running on port $port as pid $(cat "$pidfile")"
	fi
	# -sharedDb: one database whatever the credentials and region, so every
	# client of a test run sees the same tables.
	(cd "$dir" && exec java -Djava.library.path=./DynamoDBLocal_lib -jar DynamoDBLocal.jar \
		-inMemory -sharedDb -disableTelemetry -port "$port") </dev/null >"$log" 2>&1 &
	local pid=$!
	echo "$pid" >"$pidfile"
	# Wait for the port to answer, for 90 s at most: a JVM starts slowly on a busy machine.
	local deadline=$((SECONDS + 90))
	while ((SECONDS < deadline)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			cat "$log" >&2
			rm -f "$pidfile" "$log"
			die "DynamoDB Local exited during startup"
		fi
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			return
		fi
		sleep 0.1
	done
	cat "$log" >&2
	stop "$port"
	die "DynamoDB Local did not answer on port $port within 90 s"
}

stop() {
	local pidfile
	for pidfile in "$dir"/pid.${1:-*}; do
		[[ -f $pidfile ]] || continue
		stop_pid "$(cat "$pidfile")"
		rm -f "$pidfile" "$dir/server.${pidfile##*.}.log"
	done
}

# stop_pid ends pid and waits for it to go, so that its port is free.
stop_pid() {
	local pid=$1 i
	kill "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
}

case ${1:-} in
fetch) fetch ;;
start) start "${2:-}" ;;
stop) stop "${2:-}" ;;
*) die "usage: $0 fetch | start PORT | stop [PORT]" ;;
esac
