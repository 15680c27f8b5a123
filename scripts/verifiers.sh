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

root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.cache/verifiers
# Written last: a directory without it (or with other versions) is not taken
# as installed.
stamp="${PACKAGES[*]}"

die() {
	echo "verifiers: $*" >&2
	exit 1
}

installed() {
	[[ -f $dir/installed && $(<"$dir/installed") == "$stamp" && -d $dir/node_modules/standardwebhooks && -d $dir/node_modules/svix ]]
}

fetch() {
	installed && return
	command -v npm >/dev/null || die "npm is needed to fetch the webhook verifiers"
	echo "verifiers: fetching ${PACKAGES[*]} from npm into .cache/verifiers, once" >&2
	mkdir -p "$root/.cache"
	local tmp
	tmp=$(mktemp -d "$dir.XXXXXX")
	chmod 755 "$tmp"
	# shellcheck disable=SC2064 # expand $tmp now
	trap "rm -rf '$tmp'" EXIT
	if ! npm install --prefix "$tmp" --save-exact --no-audit --no-fund --no-update-notifier \
		--loglevel=error "${PACKAGES[@]}" >"$tmp/npm.log" 2>&1; then
		cat "$tmp/npm.log" >&2
		die "npm install ${PACKAGES[*]} failed"
	fi
	local pkg
	for pkg in "${PACKAGES[@]}"; do
		[[ $(node -p 'require(process.argv[1]).version' "$tmp/node_modules/${pkg%@*}/package.json") == "${pkg#*@}" ]] ||
			die "$pkg did not install"
	done
	rm -f "$tmp/npm.log"
	echo "$stamp" >"$tmp/installed"
	# Move the directory in whole; a concurrent fetch that finished first
	# wins, and an older install is replaced.
	installed || rm -rf "$dir"
	mv -T "$tmp" "$dir" 2>/dev/null || installed || die "could not move the verifiers into $dir"
}

case ${1:-} in
fetch) fetch ;;
path)
	installed || die "not fetched: run '$0 fetch' first"
	echo "$dir/node_modules"
	;;
*) die "usage: $0 fetch | path" ;;
esac
