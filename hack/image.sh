#!/usr/bin/env bash
# hack/image.sh — build herald's image from the top-level Dockerfile with
# podman, on a machine that reaches no image registry (`make image`).
#
# Run it as root on Debian 12 after hack/bootstrap.sh (which installs
# podman, runc and mmdebstrap from hack/apt-packages.txt, and Go).
#
# 1. Base images. The Dockerfile starts FROM docker.io/library/golang:<go>-bookworm
#    and docker.io/library/debian:bookworm-slim. Where either is missing from
#    podman's storage, this makes a stand-in under that name out of Debian
#    packages: mmdebstrap makes a minimal bookworm root file system with the
#    documentation excluded as the official slim image does (the exclusions
#    stay in its dpkg configuration, so later apt installs skip them too),
#    and `podman import` stores it; the golang one is the same root file
#    system plus this machine's Go toolchain and CA certificates. Both carry
#    the label io.herald.base=local. An image with that name that came from
#    a registry is used as it is. The golang stand-in is made again when the
#    machine's Go changed; HERALD_IMAGE_REBASE=1 makes both again.
# 2. Modules. The build runs with no network for Go: the machine's module
#    cache (after `go mod download`) is mounted into the build read-only and
#    used as a file:// GOPROXY (go.sum still checks every module). Anyone
#    with network access runs `docker build .` and gets the public proxy.
#    The machine's Go build cache is mounted too (GOCACHE): the build
#    stage compiles static and with -trimpath, as make's own builds do,
#    so what they compiled is reused rather than compiled again.
# 3. The build: the unchanged Dockerfile, `podman build --pull=never`, with
#    runc and rlimits no higher than root has here (crun needs
#    CAP_SYS_RESOURCE and refuses hybrid cgroups). Its RUN steps use the
#    host's network: the runtime stage installs iptables with apt.
#
# It prints the image ID, its size (uncompressed, and gzip-compressed as a
# registry would store it) and the time taken.
#
# Settings (environment):
#   IMAGE                 the tag to build            (ghcr.io/herald-lb/herald:dev)
#   VERSION               herald's version            (dev)
#   HERALD_IMAGE_GOPROXY  a GOPROXY for the build instead of the module cache
#   HERALD_DEBIAN_MIRROR  where mmdebstrap gets packages (http://deb.debian.org/debian)
#   HERALD_IMAGE_GOCACHE  the build cache the build stage uses (default: the
#                         machine's, `go env GOCACHE`; none: its own)
#   HERALD_IMAGE_REBASE   1: make the base images again even if present
#   HERALD_IMAGE_BASE_ONLY  debian: make only the debian stand-in (where
#                         missing) and stop; all: both base images, then stop.
#                         e2e/lab/e2eimages (make e2e-images) uses debian.
set -Eeuo pipefail

START=$SECONDS
log() { printf 'image: %s\n' "$*"; }
die() {
	printf 'image: ERROR: %s\n' "$*" >&2
	exit 1
}
trap 'printf "image: ERROR: command failed (exit %d) at line %d: %s\n" "$?" "$LINENO" "$BASH_COMMAND" >&2' ERR

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE=${IMAGE:-ghcr.io/herald-lb/herald:dev}
VERSION=${VERSION:-dev}
MIRROR=${HERALD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${MIRROR%/debian}/debian-security
DEBIAN_IMAGE=docker.io/library/debian:bookworm-slim
# What podman needs here: see the header, point 3.
RUNTIME_FLAGS=(--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=4096:4096)

BASE_ONLY=${HERALD_IMAGE_BASE_ONLY:-}
case $BASE_ONLY in
'' | debian | all) ;;
*) die "HERALD_IMAGE_BASE_ONLY=$BASE_ONLY: want debian or all" ;;
esac

[[ $(id -u) -eq 0 ]] || die "run as root: podman here runs rootful (root's storage, runc)"
for tool in podman runc mmdebstrap go git; do
	command -v "$tool" >/dev/null || die "$tool not found; run: bash hack/bootstrap.sh"
done

GO_FULL=$(cd "$REPO_ROOT" && GOTOOLCHAIN=local go env GOVERSION) # go1.26.8
GO_FULL=${GO_FULL%% *}
GO_MINOR=$(sed -E 's/^go([0-9]+\.[0-9]+).*/\1/' <<<"$GO_FULL") # 1.26
GOLANG_IMAGE=docker.io/library/golang:${GO_MINOR}-bookworm
GOROOT_HOST=$(GOTOOLCHAIN=local go env GOROOT)

# label IMAGE KEY: the image's label KEY, empty when absent.
label() {
	podman image inspect --format "{{index .Labels \"$2\"}}" "$1" 2>/dev/null | sed 's/<no value>//'
}

# need_base IMAGE [GO]: true when the stand-in IMAGE has to be made: it is
# missing, HERALD_IMAGE_REBASE asks for it, or (golang) it is ours and holds
# another Go than GO.
need_base() {
	podman image exists "$1" || return 0
	[[ ${HERALD_IMAGE_REBASE:-} != 1 ]] || return 0
	if [[ $# -gt 1 && $(label "$1" io.herald.base) == local && $(label "$1" io.herald.go) != "$2" ]]; then
		log "$1 holds $(label "$1" io.herald.go), this machine has $2: making it again"
		return 0
	fi
	return 1
}

WORK=
cleanup() { [[ -z $WORK ]] || rm -rf "$WORK"; }
trap cleanup EXIT

# rootfs: a bookworm root file system, made once per run in $WORK/rootfs.
rootfs() {
	[[ -z $WORK ]] || return 0
	WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/herald-image.XXXXXX")
	log "mmdebstrap: a minimal bookworm root file system from $MIRROR"
	# The path excludes are those of Debian's official slim images:
	# documentation other than copyright files, manuals, translations.
	# resolv.conf and hostname are this machine's; the runtime supplies its
	# own.
	if ! mmdebstrap --variant=minbase \
		--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
		--aptopt='Acquire::Languages "none"' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/info/*' \
		--dpkgopt='path-exclude=/usr/share/groff/*' \
		--dpkgopt='path-exclude=/usr/share/lintian/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"' \
		bookworm "$WORK/rootfs" \
		"deb $MIRROR bookworm main" \
		"deb $MIRROR bookworm-updates main" \
		"deb $SECURITY_MIRROR bookworm-security main" >"$WORK/mmdebstrap.log" 2>&1; then
		tail -n 40 "$WORK/mmdebstrap.log" >&2
		die "mmdebstrap failed (its last lines above)"
	fi
}

# import DIR IMAGE CHANGE...: stores DIR as IMAGE with the config CHANGEs.
import() {
	local dir=$1 image=$2
	shift 2
	local changes=() c
	for c in "$@" "LABEL io.herald.base=local"; do changes+=(--change "$c"); done
	tar -C "$dir" --numeric-owner --exclude='./dev/*' -cf - . | podman import --quiet "${changes[@]}" - "$image" >/dev/null
	log "made $image ($(podman image inspect --format '{{.Id}}' "$image" | cut -c1-12))"
}

PATH_DEFAULT=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
if need_base "$DEBIAN_IMAGE"; then
	rootfs
	import "$WORK/rootfs" "$DEBIAN_IMAGE" "ENV PATH=$PATH_DEFAULT" 'CMD ["bash"]'
else
	log "base $DEBIAN_IMAGE present ($(label "$DEBIAN_IMAGE" io.herald.base || true))"
fi
# base_only_done: the end of a HERALD_IMAGE_BASE_ONLY run.
base_only_done() {
	log "base images only (HERALD_IMAGE_BASE_ONLY=$BASE_ONLY): done in $((SECONDS - START)) s"
	exit 0
}
[[ $BASE_ONLY != debian ]] || base_only_done
if need_base "$GOLANG_IMAGE" "$GO_FULL"; then
	rootfs
	# The official golang image's layout: Go in /usr/local/go, GOPATH /go,
	# no toolchain switching. The CA certificates let a build that is given
	# an https GOPROXY use it.
	log "adding $GO_FULL from $GOROOT_HOST"
	cp -a "$GOROOT_HOST" "$WORK/rootfs/usr/local/go"
	mkdir -p "$WORK/rootfs/etc/ssl/certs" "$WORK/rootfs/go/bin" "$WORK/rootfs/go/src"
	cp /etc/ssl/certs/ca-certificates.crt "$WORK/rootfs/etc/ssl/certs/"
	import "$WORK/rootfs" "$GOLANG_IMAGE" \
		"ENV PATH=/go/bin:/usr/local/go/bin:$PATH_DEFAULT" "ENV GOLANG_VERSION=${GO_FULL#go}" \
		"ENV GOTOOLCHAIN=local" "ENV GOPATH=/go" "WORKDIR /go" 'CMD ["bash"]' "LABEL io.herald.go=$GO_FULL"
else
	log "base $GOLANG_IMAGE present"
fi
cleanup
WORK=
[[ $BASE_ONLY != all ]] || base_only_done

REVISION=$(git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null || true)
if [[ -n $REVISION && -n $(git -C "$REPO_ROOT" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
	REVISION+=-dirty
fi

BUILD=(podman build --pull=never "${RUNTIME_FLAGS[@]}" --network host
	--build-arg "GO_VERSION=$GO_MINOR" --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION")
if [[ -n ${HERALD_IMAGE_GOPROXY:-} ]]; then
	BUILD+=(--build-arg "GOPROXY=$HERALD_IMAGE_GOPROXY")
else
	MODCACHE=$(cd "$REPO_ROOT" && go env GOMODCACHE)
	log "go mod download (the build reads the module cache $MODCACHE, not the network)"
	(cd "$REPO_ROOT" && go mod download)
	BUILD+=(--volume "$MODCACHE/cache/download:/goproxy:ro"
		--build-arg GOPROXY=file:///goproxy --build-arg GOSUMDB=off)
fi
# The machine's build cache, shared with the build stage: what `make test`
# compiled before (static, -trimpath, as the Dockerfile builds) is not
# compiled again. HERALD_IMAGE_GOCACHE=none keeps the build to the cache
# mount of its own.
GOCACHE_HOST=${HERALD_IMAGE_GOCACHE:-$(cd "$REPO_ROOT" && go env GOCACHE)}
if [[ $GOCACHE_HOST != none && -d $GOCACHE_HOST ]]; then
	BUILD+=(--volume "$GOCACHE_HOST:/go-build-host" --build-arg GOCACHE=/go-build-host)
fi
IIDFILE=$(mktemp)
BUILD+=(--iidfile "$IIDFILE" --tag "$IMAGE" --file "$REPO_ROOT/Dockerfile" "$REPO_ROOT")
log "${BUILD[*]}"
"${BUILD[@]}"

ID=$(cat "$IIDFILE")
rm -f "$IIDFILE"
SIZE=$(podman image inspect --format '{{.Size}}' "$ID")
# Registries store layers gzip-compressed; this is close to their figure.
GZ=$(podman save --format docker-archive "$ID" 2>/dev/null | gzip -6 | wc -c)
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }
echo
echo "image:    $IMAGE"
echo "id:       ${ID#sha256:}"
echo "size:     $(mb "$SIZE") ($(mb "$GZ") gzip-compressed)"
echo "revision: ${REVISION:-unknown}"
echo "took:     $((SECONDS - START)) s"
echo "try it:   podman run --rm ${RUNTIME_FLAGS[*]} --network none $IMAGE version"
