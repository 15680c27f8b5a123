#!/usr/bin/env bash
# Fetches aws-local-stepfunctions (local-sfn), which runs Step Functions
# definitions locally, for the tests (internal/sfntest).
#
#   local-sfn.sh fetch   put it in .cache/local-sfn (again only if the versions changed)
#   local-sfn.sh path    print the command line that runs it
#
# local-sfn 3 needs Node >= 22 and our machines have Node 20, so a Node 22
# binary comes along from the npm package node, which ships one (its install
# script fetches node-<os>-<arch> of the same version). Run the CLI with it,
# the execution input on stdin:
#
#   .cache/local-sfn/node_modules/.bin/node \
#     .cache/local-sfn/node_modules/aws-local-stepfunctions/bin/CLI.cjs \
#     -f def.json --override-task State:program --override-wait State:ms <input.json
#
# npm is a registry every machine of ours reaches; nothing is installed
# globally. The two packages are pinned exactly; their dependencies resolve
# within the ranges they declare, as of the fetch.
set -euo pipefail

# Exact versions; the integrity pins the local-sfn tarball itself (npm's
# lockfile records it).
LOCAL_SFN=aws-local-stepfunctions@3.0.0
LOCAL_SFN_INTEGRITY=sha512-Ey6alNmQOk+v1TcRItZakz+MgWTNyw11NOjOpyvohV9zt6s+C0THFHfnqR+PSaK62m1gRLYv4ZrFfEVlnBM0Sw==
NODE=node@22.23.3

root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.cache/local-sfn
# Written last: a directory without it (or with other versions) is not taken
# as installed.
stamp="$LOCAL_SFN $NODE"

die() {
	echo "local-sfn: $*" >&2
	exit 1
}

installed() {
	[[ -f $dir/installed && $(<"$dir/installed") == "$stamp" && -x $dir/node_modules/.bin/node &&
		-f $dir/node_modules/aws-local-stepfunctions/bin/CLI.cjs ]]
}

fetch() {
	installed && return
	command -v npm >/dev/null || die "npm is needed to fetch local-sfn"
	echo "local-sfn: fetching $LOCAL_SFN and a Node 22 binary ($NODE) from npm (about 215 MB) into .cache/local-sfn, once" >&2
	mkdir -p "$root/.cache"
	# Install next to the destination, so that the final move is a rename
	# (the node_modules/.bin links are relative).
	local tmp
	tmp=$(mktemp -d "$dir.XXXXXX")
	chmod 755 "$tmp"
	# shellcheck disable=SC2064 # expand $tmp now
	trap "rm -rf '$tmp'" EXIT
	if ! npm install --prefix "$tmp" --save-exact --no-audit --no-fund --no-update-notifier \
		--loglevel=error "$LOCAL_SFN" "$NODE" >"$tmp/npm.log" 2>&1; then
		cat "$tmp/npm.log" >&2
		die "npm install $LOCAL_SFN $NODE failed"
	fi
	local integrity
	integrity=$(node -p 'require(process.argv[1]).packages["node_modules/aws-local-stepfunctions"].integrity' \
		"$tmp/package-lock.json")
	[[ $integrity == "$LOCAL_SFN_INTEGRITY" ]] || die "$LOCAL_SFN does not match its pinned integrity ($integrity)"
	local bin=$tmp/node_modules/.bin/node cli=$tmp/node_modules/aws-local-stepfunctions/bin/CLI.cjs
	[[ -x $bin ]] || die "$NODE installed no node_modules/.bin/node"
	[[ $("$bin" --version) == "v${NODE#node@}" ]] || die "$NODE runs as node $("$bin" --version)"
	[[ $("$bin" "$cli" --version) == "${LOCAL_SFN#*@}" ]] || die "$LOCAL_SFN does not run"
	rm -f "$tmp/npm.log"
	echo "$stamp" >"$tmp/installed"
	# Move the directory in whole; a concurrent fetch that finished first
	# wins, and an older install is replaced.
	installed || rm -rf "$dir"
	mv -T "$tmp" "$dir" 2>/dev/null || installed || die "could not move local-sfn into $dir"
}

case ${1:-} in
fetch) fetch ;;
path)
	installed || die "not fetched: run '$0 fetch' first"
	echo "$dir/node_modules/.bin/node $dir/node_modules/aws-local-stepfunctions/bin/CLI.cjs"
	;;
*) die "usage: $0 fetch | path" ;;
esac
