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

name=fauxqs
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.cache/fauxqs
node=$root/.cache/local-sfn/node_modules/.bin/node
stamp=$FAUXQS # written last: an install without it (or with another version) is not taken
# shellcheck source=scripts/npm-fetch.sh
source "$root/scripts/npm-fetch.sh"

installed() {
	[[ -f $dir/installed && $(<"$dir/installed") == "$stamp" && -f $dir/node_modules/fauxqs/dist/app.js ]]
}

verify() {
	local integrity
	integrity=$(npm_integrity "$1" fauxqs)
	[[ $integrity == "$FAUXQS_INTEGRITY" ]] || die "$FAUXQS does not match its pinned integrity ($integrity)"
	# It loads on the Node it will run on.
	"$node" --input-type=module -e "await import('$1/node_modules/fauxqs/dist/app.js')" 2>"$1/load.log" ||
		{ cat "$1/load.log" >&2; die "$FAUXQS does not load on $("$node" --version)"; }
	rm -f "$1/load.log"
}

case ${1:-} in
fetch)
	"$root/scripts/local-sfn.sh" fetch # the Node 22 it runs on
	# --ignore-scripts: fauxqs and its dependencies need no install step.
	npm_fetch "$FAUXQS (about 45 MB)" --ignore-scripts "$FAUXQS"
	;;
path)
	installed || die "not fetched: run '$0 fetch' first"
	echo "$node $dir/node_modules/fauxqs"
	;;
*) die "usage: $0 fetch | path" ;;
esac
