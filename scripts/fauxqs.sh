#!/usr/bin/env bash
# Fetches fauxqs, an SQS emulator that speaks the JSON protocol the Go SDK
# uses, for the tests (internal/sqstest).
#
#   fauxqs.sh fetch   put it in .cache/fauxqs (again only if the version changed)
#   fauxqs.sh path    print the node binary and fauxqs' directory
#
# fauxqs 2 needs Node >= 22.5 (node:sqlite); it runs on the Node 22 that
# scripts/local-sfn.sh fetches, which this script fetches first. The tests
# start it through a launcher of their own (internal/sqstest), listening on
# loopback only. npm is a registry every machine of ours reaches; nothing is
# installed globally. The package is pinned exactly and by the integrity of
# its tarball; its dependencies resolve within the ranges it declares, as of
# the fetch.
set -euo pipefail

FAUXQS=fauxqs@2.4.1
FAUXQS_INTEGRITY=sha512-b5aaEqzziRxlYLRzJsP3t5ROQ7hhzQyrHnUjDL/IMdqS8XQ0K9Su+YkM/Q/mKCZk+t82F8loEN37WpL5R/RWUQ==

root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.cache/fauxqs
node=$root/.cache/local-sfn/node_modules/.bin/node
# Written last: a directory without it (or with another version) is not
# taken as installed.
stamp=$FAUXQS

die() {
	echo "fauxqs: $*" >&2
	exit 1
}

installed() {
	[[ -f $dir/installed && $(<"$dir/installed") == "$stamp" && -f $dir/node_modules/fauxqs/dist/app.js ]]
}

fetch() {
	"$root/scripts/local-sfn.sh" fetch # the Node 22 it runs on
	installed && return
	command -v npm >/dev/null || die "npm is needed to fetch fauxqs"
	echo "fauxqs: fetching $FAUXQS from npm (about 45 MB) into .cache/fauxqs, once" >&2
	mkdir -p "$root/.cache"
	local tmp
	tmp=$(mktemp -d "$dir.XXXXXX")
	chmod 755 "$tmp"
	# shellcheck disable=SC2064 # expand $tmp now
	trap "rm -rf '$tmp'" EXIT
	# --ignore-scripts: fauxqs and its dependencies need no install step.
	if ! npm install --prefix "$tmp" --save-exact --ignore-scripts --no-audit --no-fund --no-update-notifier \
		--loglevel=error "$FAUXQS" >"$tmp/npm.log" 2>&1; then
		cat "$tmp/npm.log" >&2
		die "npm install $FAUXQS failed"
	fi
	local integrity
	integrity=$(node -p 'require(process.argv[1]).packages["node_modules/fauxqs"].integrity' "$tmp/package-lock.json")
	[[ $integrity == "$FAUXQS_INTEGRITY" ]] || die "$FAUXQS does not match its pinned integrity ($integrity)"
	# It loads on the Node it will run on.
	"$node" --input-type=module -e "await import('$tmp/node_modules/fauxqs/dist/app.js')" 2>"$tmp/load.log" ||
		{ cat "$tmp/load.log" >&2; die "$FAUXQS does not load on $("$node" --version)"; }
	rm -f "$tmp/npm.log" "$tmp/load.log"
	echo "$stamp" >"$tmp/installed"
	# Move the directory in whole; a concurrent fetch that finished first
	# wins, and an older install is replaced.
	installed || rm -rf "$dir"
	mv -T "$tmp" "$dir" 2>/dev/null || installed || die "could not move fauxqs into $dir"
}

case ${1:-} in
fetch) fetch ;;
path)
	installed || die "not fetched: run '$0 fetch' first"
	echo "$node $dir/node_modules/fauxqs"
	;;
*) die "usage: $0 fetch | path" ;;
esac
