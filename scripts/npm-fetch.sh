# shellcheck shell=bash
# Sourced by the scripts that fetch npm packages for the tests into
# .cache/<name> (fauxqs.sh, local-sfn.sh, verifiers.sh). The caller sets
# name (for messages), root, dir and stamp, and defines installed (is $dir
# a complete install of $stamp?) and verify TMP (does the install in TMP
# work? die if not).

die() {
	echo "$name: $*" >&2
	exit 1
}

# npm_fetch WHAT NPM-ARGS...: unless installed, npm-installs NPM-ARGS
# (exact versions, and flags) next to $dir, verifies the install, stamps it
# and moves it into $dir in whole, so that an interrupted fetch leaves
# nothing that looks installed. WHAT is what the message says is fetched.
npm_fetch() {
	local what=$1
	shift
	installed && return
	command -v npm >/dev/null || die "npm is needed to fetch $name"
	echo "$name: fetching $what from npm into ${dir#"$root"/}, once" >&2
	mkdir -p "$(dirname "$dir")"
	# Next to the destination, so that the move is a rename (the
	# node_modules/.bin links are relative).
	local tmp
	tmp=$(mktemp -d "$dir.XXXXXX")
	chmod 755 "$tmp"
	# shellcheck disable=SC2064 # expand $tmp now
	trap "rm -rf '$tmp'" EXIT
	if ! npm install --prefix "$tmp" --save-exact --no-audit --no-fund --no-update-notifier \
		--loglevel=error "$@" >"$tmp/npm.log" 2>&1; then
		cat "$tmp/npm.log" >&2
		die "npm install $* failed"
	fi
	rm -f "$tmp/npm.log"
	verify "$tmp"
	echo "$stamp" >"$tmp/installed"
	# A concurrent fetch that finished first wins, and an older install is
	# replaced.
	installed || rm -rf "$dir"
	mv -T "$tmp" "$dir" 2>/dev/null || installed || die "could not move $name into $dir"
}

# npm_integrity TMP PACKAGE prints the integrity of PACKAGE's tarball as
# npm's lockfile in TMP records it.
npm_integrity() {
	node -p 'require(process.argv[1]).packages["node_modules/" + process.argv[2]].integrity' "$1/package-lock.json" "$2"
}
