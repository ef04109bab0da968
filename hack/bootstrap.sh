#!/usr/bin/env bash
# hack/bootstrap.sh — make a fresh Debian machine able to build and test herald.
#
# Run it as root from anywhere:  bash hack/bootstrap.sh
#
# 1. Installs the Debian packages listed in hack/apt-packages.txt that are not
#    installed yet. When all of them are, apt is not touched at all, so a
#    second run takes well under a second.
# 2. Makes sure a Go toolchain >= GO_MIN (the `go` line of go.mod) is there.
#    It looks for `go` on PATH and in $HERALD_GOROOT/bin (/usr/local/go/bin).
#    If there is none, it installs Debian's golang-go first. Debian 12's
#    golang-go is Go 1.19, older than toolchain switching (GOTOOLCHAIN, Go
#    1.21), so it cannot fetch a newer toolchain by itself: this script then
#    uses that go to download the official toolchain module
#    golang.org/toolchain@v0.0.1-go$HERALD_GO_VERSION.linux-$GOARCH from the
#    Go module proxy (the same module GOTOOLCHAIN=auto would fetch) and
#    unpacks it to $HERALD_GOROOT. An older Go already at $HERALD_GOROOT is
#    moved aside, never deleted.
# 3. Downloads the root module's dependencies (`go mod download`) so that a
#    missing network shows up here, by name, rather than in the middle of a
#    test run.
#
# The Makefile puts $HERALD_GOROOT/bin first on PATH, so `make ...` finds the
# toolchain even in a shell that does not have it on PATH.
#
# Settings (environment):
#   HERALD_GO_VERSION  Go release installed when none >= GO_MIN is found (1.26.8)
#   HERALD_GOROOT      where that release goes                 (/usr/local/go)
set -Eeuo pipefail

ORIG_PATH=$PATH
GO_MIN=1.26
HERALD_GO_VERSION=${HERALD_GO_VERSION:-1.26.8}
HERALD_GOROOT=${HERALD_GOROOT:-/usr/local/go}
export DEBIAN_FRONTEND=noninteractive

log() { printf 'bootstrap: %s\n' "$*"; }
die() {
	printf 'bootstrap: ERROR: %s\n' "$*" >&2
	exit 1
}
trap 'printf "bootstrap: ERROR: command failed (exit %d) at line %d: %s\n" "$?" "$LINENO" "$BASH_COMMAND" >&2' ERR

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PACKAGE_LIST=$REPO_ROOT/hack/apt-packages.txt
[[ -f $PACKAGE_LIST ]] || die "package list $PACKAGE_LIST is missing"

is_root() { [[ $(id -u) -eq 0 ]]; }

# pkg_installed NAME: true when dpkg has NAME fully installed (what `dpkg -s`
# shows as "Status: install ok installed").
pkg_installed() {
	[[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == 'install ok installed' ]]
}

APT_UPDATED=
# apt_install PKG...: installs the packages, running `apt-get update` once.
apt_install() {
	is_root || die "these Debian packages are missing: $*; run this script as root, or install them: apt-get install $*"
	command -v apt-get >/dev/null || die "apt-get not found; install these packages by hand: $*"
	if [[ -z $APT_UPDATED ]]; then
		log "apt-get update"
		apt-get update -q
		APT_UPDATED=1
	fi
	# frr and bird2 start system-wide daemons when installed on a machine
	# with an init system; the lab runs its own instances in its router
	# namespace and wants nothing running outside it. policy-rc.d is
	# Debian's switch for "do not start services now"; a machine that has
	# its own policy keeps it.
	local policy=/usr/sbin/policy-rc.d made= rc=0
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\n# written by herald hack/bootstrap.sh during apt-get install\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		made=1
	fi
	log "apt-get install $*"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" || rc=$?
	if [[ -n $made ]]; then rm -f "$policy"; fi
	return "$rc"
}

# ---------------------------------------------------------------------------
# 1. Debian packages
mapfile -t PACKAGES < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$PACKAGE_LIST")
if command -v dpkg >/dev/null; then
	missing=()
	for p in "${PACKAGES[@]}"; do
		pkg_installed "$p" || missing+=("$p")
	done
	if ((${#missing[@]} == 0)); then
		log "Debian packages: all ${#PACKAGES[@]} present (${PACKAGES[*]})"
	else
		log "Debian packages: missing ${missing[*]}"
		apt_install "${missing[@]}"
	fi
else
	log "WARNING: no dpkg here (not Debian?); make sure these are installed: ${PACKAGES[*]}"
fi

# ---------------------------------------------------------------------------
# 2. Go toolchain >= GO_MIN

# version_ge A B: true when version A >= version B (1.26.8 >= 1.26).
version_ge() {
	[[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | sed -n 1p) == "$2" ]]
}

# go_version BIN: prints BIN's own version (1.26.8) without letting it switch
# toolchains; prints nothing if BIN does not run.
go_version() {
	local v
	v=$(cd / && GOTOOLCHAIN=local GOFLAGS='' "$1" env GOVERSION 2>/dev/null) || return 0
	v=${v%% *}
	printf '%s\n' "${v#go}"
}

# go_ok BIN: true when BIN is a Go toolchain >= GO_MIN.
go_ok() {
	local v
	v=$(go_version "$1")
	[[ -n $v ]] || return 1
	[[ $v == devel* ]] && return 0
	version_ge "$v" "$GO_MIN"
}

# install_toolchain GO: uses the (older) go binary GO to fetch
# golang.org/toolchain for HERALD_GO_VERSION from the module proxy and unpack
# it to HERALD_GOROOT.
install_toolchain() {
	local oldgo=$1 goos goarch mod tmp dir stage old
	goos=$(cd / && GOFLAGS='' "$oldgo" env GOOS)
	goarch=$(cd / && GOFLAGS='' "$oldgo" env GOARCH)
	mod=golang.org/toolchain@v0.0.1-go${HERALD_GO_VERSION}.${goos}-${goarch}
	is_root || [[ -w $(dirname "$HERALD_GOROOT") ]] ||
		die "cannot write $(dirname "$HERALD_GOROOT"); run as root or set HERALD_GOROOT to a writable directory"

	tmp=$(mktemp -d)
	# The module cache is read-only; make it writable again before removing it.
	# shellcheck disable=SC2064 # expand $tmp now, on purpose
	trap "chmod -R u+w '$tmp' 2>/dev/null || true; rm -rf '$tmp'" EXIT

	log "downloading Go $HERALD_GO_VERSION as module $mod from the Go module proxy (with $("$oldgo" version))"
	dir=$(cd "$tmp" && GOPATH=$tmp/gopath GOMODCACHE=$tmp/gopath/pkg/mod GOCACHE=$tmp/cache \
		GO111MODULE=on GOFLAGS='' GOTOOLCHAIN=local \
		"$oldgo" mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[[ -n $dir && -d $dir/bin ]] || die "downloading $mod gave no toolchain directory"

	stage=$HERALD_GOROOT.new.$$
	rm -rf "$stage"
	cp -R "$dir" "$stage"
	chmod -R u+w "$stage"
	# Module zips carry no file modes; the toolchain's programs need +x (the
	# go command's own toolchain switch does the same after its download).
	chmod 0755 "$stage"/bin/* "$stage"/pkg/tool/*/*
	if [[ -e $HERALD_GOROOT ]]; then
		old=$HERALD_GOROOT-$(go_version "$HERALD_GOROOT/bin/go" || true)
		[[ $old != "$HERALD_GOROOT-" && ! -e $old ]] || old=$HERALD_GOROOT.old.$(date +%s)
		log "moving the older Go at $HERALD_GOROOT aside to $old"
		mv "$HERALD_GOROOT" "$old"
	fi
	mv "$stage" "$HERALD_GOROOT"
	log "installed $("$HERALD_GOROOT/bin/go" version) at $HERALD_GOROOT"
}

if [[ -d $HERALD_GOROOT/bin ]]; then
	PATH=$HERALD_GOROOT/bin:$PATH
fi
export PATH

if ! command -v go >/dev/null; then
	log "no go on PATH: installing Debian's golang-go to bootstrap from"
	apt_install golang-go
	hash -r
	command -v go >/dev/null || die "golang-go is installed but there is still no go on PATH"
fi

GO=$(command -v go)
if go_ok "$GO"; then
	log "Go: $GO is go$(go_version "$GO") (>= $GO_MIN needed): ok"
else
	log "Go: $GO is go$(go_version "$GO"), older than the $GO_MIN that go.mod needs"
	install_toolchain "$GO"
	PATH=$HERALD_GOROOT/bin:$PATH
	hash -r
	GO=$(command -v go)
	go_ok "$GO" || die "$GO is still go$(go_version "$GO") after installing Go $HERALD_GO_VERSION"
	log "Go: now $GO (go$(go_version "$GO"))"
fi
case ":$ORIG_PATH:" in
*":$(dirname "$GO"):"*) ;;
*) log "note: $(dirname "$GO") is not on your shell's PATH; make adds it itself, for your shell: export PATH=$(dirname "$GO"):\$PATH" ;;
esac

# ---------------------------------------------------------------------------
# 3. Go modules
log "go mod download (root module)"
(cd "$REPO_ROOT" && "$GO" mod download)

log "done: make build | make test | make lint | make fuzz"
