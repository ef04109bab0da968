# herald's image: the static herald binary and the iptables tools it runs.
#
#   docker build --build-arg VERSION=v0.1.0 --build-arg REVISION=$(git rev-parse HEAD) -t herald .
#
# `make image` builds this same file with podman, from base images it
# makes out of Debian packages (hack/image.sh). Build arguments:
#   GO_VERSION    the golang image's tag prefix (go.mod's go line)
#   GOLANG_IMAGE  the build stage's image
#   BASE_IMAGE    the runtime stage's image; it must be Debian-like (apt)
#   VERSION, REVISION  what `herald version` and the labels say; the
#                 context carries no .git, so the revision comes from here
#   GOPROXY, GOFLAGS, GOSUMDB, GOCACHE  passed to the go command (empty:
#                 its defaults)
ARG GO_VERSION=1.26
ARG GOLANG_IMAGE=docker.io/library/golang:${GO_VERSION}-bookworm
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${GOLANG_IMAGE} AS build
ARG GOPROXY
ARG GOFLAGS
ARG GOSUMDB
# Empty: the go command's own cache (the cache mount below). hack/image.sh
# points it at the machine's build cache, mounted into the build, so the
# packages make's earlier builds compiled the same way are not compiled
# again.
ARG GOCACHE
WORKDIR /src
# Modules first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=
# Static (no cgo: the runtime stage needs no libc of a given version),
# reproducible paths, no symbol tables (panics still print stacks).
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
	CGO_ENABLED=0 go build -trimpath -buildvcs=false \
	-ldflags "-s -w -X github.com/herald-lb/herald/internal/version.Version=${VERSION} -X github.com/herald-lb/herald/internal/version.Revision=${REVISION}" \
	-o /out/herald ./cmd/herald

FROM ${BASE_IMAGE}
# iptables brings both backends (xtables-legacy-multi, xtables-nft-multi
# and their iptables-/ip6tables-{legacy,nft}{,-save,-restore} names); the
# proxy picks the node's at start (--iptables-backend). Nothing else is
# run: conntrack entries are deleted over netlink, ARP/NDP and BGP are in
# the binary. Package lists, caches, logs and documentation other than
# the copyright files are removed in the same layer.
RUN apt-get update \
	&& DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iptables \
	&& apt-get clean \
	&& rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/lib/dpkg/*-old \
		/var/log/apt /var/log/dpkg.log /var/log/alternatives.log /usr/share/man /usr/share/info /usr/share/locale \
	&& find /usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete \
	&& iptables-legacy-save --version && iptables-nft-save --version
COPY LICENSE /usr/share/doc/herald/copyright
COPY --from=build /out/herald /usr/local/bin/herald
ARG VERSION=dev
ARG REVISION=
LABEL org.opencontainers.image.title="herald" \
	org.opencontainers.image.description="LoadBalancer Services and a kube-proxy replacement for bare-metal Kubernetes" \
	org.opencontainers.image.source="https://github.com/herald-lb/herald" \
	org.opencontainers.image.licenses="Apache-2.0" \
	org.opencontainers.image.version="${VERSION}" \
	org.opencontainers.image.revision="${REVISION}"
ENTRYPOINT ["/usr/local/bin/herald"]
CMD ["version"]
