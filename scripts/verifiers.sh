#!/usr/bin/env bash
# Fetches the Standard Webhooks verifiers of other vendors, which the tests
# run with node to check the webhooks Tally signs (internal/httpapi): the
# official standardwebhooks package and Svix's svix.
#
#   verifiers.sh fetch   put them in .cache/verifiers (again only if the versions changed)
#   verifiers.sh path    print the node_modules directory that holds them
#
# Both run on the machine's Node 20; nothing is installed globally. The
# packages are pinned exactly; their dependencies resolve within the ranges
# they declare, as of the fetch.
set -euo pipefail

PACKAGES=(standardwebhooks@1.1.1 svix@2.5.0)

name=verifiers
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.cache/verifiers
stamp="${PACKAGES[*]}" # written last: an install without it (or with other versions) is not taken
# shellcheck source=scripts/npm-fetch.sh
source "$root/scripts/npm-fetch.sh"

installed() {
	[[ -f $dir/installed && $(<"$dir/installed") == "$stamp" && -d $dir/node_modules/standardwebhooks && -d $dir/node_modules/svix ]]
}

verify() {
	local pkg
	for pkg in "${PACKAGES[@]}"; do
		[[ $(node -p 'require(process.argv[1]).version' "$1/node_modules/${pkg%@*}/package.json") == "${pkg#*@}" ]] ||
			die "$pkg did not install"
	done
}

case ${1:-} in
fetch) npm_fetch "${PACKAGES[*]}" "${PACKAGES[@]}" ;;
path)
	installed || die "not fetched: run '$0 fetch' first"
	echo "$dir/node_modules"
	;;
*) die "usage: $0 fetch | path" ;;
esac
