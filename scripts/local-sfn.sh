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

name=local-sfn
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.cache/local-sfn
stamp="$LOCAL_SFN $NODE" # written last: an install without it (or with other versions) is not taken
# shellcheck source=scripts/npm-fetch.sh
source "$root/scripts/npm-fetch.sh"

installed() {
	[[ -f $dir/installed && $(<"$dir/installed") == "$stamp" && -x $dir/node_modules/.bin/node &&
		-f $dir/node_modules/aws-local-stepfunctions/bin/CLI.cjs ]]
}

verify() {
	local integrity
	integrity=$(npm_integrity "$1" aws-local-stepfunctions)
	[[ $integrity == "$LOCAL_SFN_INTEGRITY" ]] || die "$LOCAL_SFN does not match its pinned integrity ($integrity)"
	local bin=$1/node_modules/.bin/node cli=$1/node_modules/aws-local-stepfunctions/bin/CLI.cjs
	[[ -x $bin ]] || die "$NODE installed no node_modules/.bin/node"
	[[ $("$bin" --version) == "v${NODE#node@}" ]] || die "$NODE runs as node $("$bin" --version)"
	[[ $("$bin" "$cli" --version) == "${LOCAL_SFN#*@}" ]] || die "$LOCAL_SFN does not run"
}

case ${1:-} in
fetch) npm_fetch "$LOCAL_SFN and a Node 22 binary ($NODE) (about 215 MB)" "$LOCAL_SFN" "$NODE" ;;
path)
	installed || die "not fetched: run '$0 fetch' first"
	echo "$dir/node_modules/.bin/node $dir/node_modules/aws-local-stepfunctions/bin/CLI.cjs"
	;;
*) die "usage: $0 fetch | path" ;;
esac
