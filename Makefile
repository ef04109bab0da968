# herald — build, test, lint and fuzz. Needs GNU make and bash.
#
# A fresh Debian machine (as root):   bash hack/bootstrap.sh && make test
# `make help` lists the targets.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build
MAKEFLAGS += --no-print-directory

# hack/bootstrap.sh installs Go here when the machine has none new enough; put
# it first on PATH so make finds it even when the calling shell does not.
HERALD_GOROOT ?= /usr/local/go
export PATH := $(if $(wildcard $(HERALD_GOROOT)/bin/go),$(HERALD_GOROOT)/bin:)$(PATH)

GO ?= go
# The `go` line of go.mod.
GO_MIN := 1.26
# Extra flags for `go test` of the unit tests and of the e2e suite.
GOTESTFLAGS ?=
# The e2e suite waits for real processes (never cached: its results depend
# on the machine, not only on the code); the Kubernetes build it needs is
# done beforehand by `herald-lab build`, so this covers the tests alone.
# -p 1: the packages share one machine-wide lab lock (and two cores), so they
# run one after another instead of timing out waiting for each other.
E2E_TESTFLAGS ?= -count=1 -p 1 -timeout 60m
# How long `make fuzz` runs each fuzz target (any `go test -fuzztime` value).
FUZZTIME ?= 60s
# How long `make test` (fuzz-short) runs each target: short enough for CI,
# long enough to catch the plain breakage a change brings. Measured on 2
# cores, 9 targets: 3m31s after a cold `go test ./...` (fuzzing builds
# every package again, instrumented), 1m57s with those builds cached.
SHORT_FUZZTIME ?= 10s
# ... and how long it shrinks each new interesting input (go's default is
# 60s, which a 10 s pass spent shrinking rather than fuzzing).
SHORT_FUZZMINIMIZETIME ?= 1s

# Every go command make runs (unit tests, fuzzing, the lab's binaries and
# e2e tests, the image's build stage through hack/image.sh) builds the way
# the image and the lab's Kubernetes binaries are built: without cgo and
# with -trimpath. The packages they have in common are then compiled once
# and found in the build cache by the others (the image's build stage
# reads the machine's cache), which is most of what a fresh machine
# spends building; herald needs no cgo.
export CGO_ENABLED := 0
export GOFLAGS := $(strip -trimpath $(filter-out -trimpath,$(GOFLAGS)))

BIN := $(CURDIR)/bin
# staticcheck 2026.2.2; builds with, and understands, Go 1.26.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK := $(BIN)/staticcheck
# Helm for the chart's tests, built with `go install` (the Go module proxy
# is all it needs) and kept out of go.mod.
HELM_VERSION ?= v3.22.0
HELM := $(BIN)/helm

.PHONY: help deps toolchain tools helm build generate manifests test unit-test chart-test e2e-test e2e-all e2e-image-test e2e-real-test compat conformance lab lab-down bench lint fuzz fuzz-short image clean

help: ## list the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z0-9-]+):.*## /  make \1\t/' | expand -t 22

deps: ## install what building and testing need: Debian packages, Go, Go tools in ./bin
	bash hack/bootstrap.sh
	@$(MAKE) tools || echo "make deps: WARNING: could not install staticcheck $(STATICCHECK_VERSION); make lint will run without it"
	@$(MAKE) helm || echo "make deps: WARNING: could not install helm $(HELM_VERSION); make chart-test will try again"

# toolchain fails early, with a hint, when there is no Go new enough; it
# installs nothing, so targets can depend on it for free.
toolchain:
	@command -v $(GO) >/dev/null || { echo "make: no Go toolchain found; run: bash hack/bootstrap.sh (or make deps)" >&2; exit 1; }
	@v=$$($(GO) env GOVERSION) || { echo "make: '$(GO) env' failed; run: bash hack/bootstrap.sh (or make deps)" >&2; exit 1; }; \
	v=$${v%% *}; v=$${v#go}; \
	case "$$v" in devel*) exit 0;; esac; \
	if [ "$$(printf '%s\n%s\n' "$(GO_MIN)" "$$v" | sort -V | sed -n 1p)" != "$(GO_MIN)" ]; then \
		echo "make: $$(command -v $(GO)) is go$$v, go.mod needs >= $(GO_MIN); run: bash hack/bootstrap.sh (or make deps)" >&2; exit 1; \
	fi

# tools installs staticcheck into ./bin unless the right version, built by the
# current Go, is already there.
tools: toolchain
	@want="($(STATICCHECK_VERSION:v%=%))"; gov=$$($(GO) env GOVERSION); \
	if [ -x $(STATICCHECK) ] && $(STATICCHECK) -version 2>/dev/null | grep -qF "$$want" \
		&& [ "$$($(GO) version $(STATICCHECK) 2>/dev/null | awk '{print $$2}')" = "$$gov" ]; then \
		exit 0; \
	fi; \
	echo "GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)"; \
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# helm installs Helm $(HELM_VERSION) into ./bin unless that version is
# there: about 4.5 minutes with empty module and build caches, 20 s with
# warm ones.
helm: toolchain ## install the pinned Helm (HELM_VERSION) into ./bin
	@if [ -x $(HELM) ] && [ "$$($(GO) version -m $(HELM) 2>/dev/null | awk '$$1 == "mod" && $$2 == "helm.sh/helm/v3" {print $$3}')" = "$(HELM_VERSION)" ]; then \
		exit 0; \
	fi; \
	echo "GOBIN=$(BIN) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)"; \
	GOBIN=$(BIN) $(GO) install -ldflags "-X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION)" helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

# IMAGE and VERSION (environment or make variables) name the image and the
# version it reports; hack/image.sh lists the other settings.
IMAGE ?= ghcr.io/herald-lb/herald:dev
VERSION ?= dev

image: toolchain ## (root) build the image from the Dockerfile with podman, base images made from Debian packages
	IMAGE=$(IMAGE) VERSION=$(VERSION) bash hack/image.sh

build: toolchain ## build bin/herald
	$(GO) build -o bin/herald ./cmd/herald

generate: toolchain ## regenerate deepcopy code and CRDs (config/crd/bases, the chart's crds/, config/deploy) from config/v1beta1
	$(GO) tool controller-gen object paths=./config/v1beta1/... crd:crdVersions=v1 output:crd:artifacts:config=config/crd/bases
	rm -f charts/herald/crds/*.yaml && cp config/crd/bases/*.yaml charts/herald/crds/
	@$(MAKE) manifests

# manifests renders the kustomizations into the plain files kept for
# `kubectl apply -f` (config/deploy, config/proxy-only), as
# config/manifests' test checks them.
manifests: toolchain ## render config/default and the proxy-only overlay into config/deploy and config/proxy-only
	$(GO) test -count=1 -run '^TestRenderings$$' ./config/manifests -update

# make test must fit 60 minutes on a fresh 2-core machine, builds included
# (CI allows 90): 41.3 minutes on one just booted, 2026-11-28
# (docs/testing.md). The whole e2e suite in binary mode alone once
# outlasted go test's 60-minute timeout. So make test runs the
# e2e tests that guard what users run and what the issues' targets are
# (E2E_TESTS, below) and the user-facing ones on real nodes; make e2e-all
# runs everything (docs/testing.md says which test runs where).
test: unit-test ## unit tests (the chart's included), every fuzz target for 10s, the e2e tests of make test (root), then the user-facing tests on real nodes
	@$(MAKE) fuzz-short
	@$(MAKE) e2e-test
	@$(MAKE) e2e-real-test

e2e-all: toolchain helm ## (root) every e2e test: the whole suite in binary mode, its image-mode pass, then real nodes (about 2 hours; not in CI)
	@$(MAKE) e2e-test E2E_TESTS=. E2E_PACKAGES=./... E2E_TESTFLAGS='-count=1 -p 1 -timeout 150m'
	@$(MAKE) e2e-image-test
	@$(MAKE) e2e-real-test E2E_REAL_TESTS='^(TestSourceIPWalkthrough|TestProxy|TestProxyNFTables|TestL2MoveKeepsConnections|$(E2E_FAULT_TESTS))$$$$'

# unit-test gives the chart's tests the pinned Helm, so under make they run
# rather than skip (a bare `go test ./...` without Helm skips them, saying so).
unit-test: toolchain helm ## go test ./... with the pinned Helm for the chart's tests (no root needed)
	hack/recap.sh unit-test env HERALD_HELM=$(HELM) $(GO) test $(strip $(GOTESTFLAGS) ./...)

# chart-test runs the chart's tests with the pinned Helm: HERALD_HELM makes
# them run (go test ./... alone skips them, saying so) and fail if it is
# broken.
chart-test: helm ## helm lint and the golden helm template outputs of charts/herald
	HERALD_HELM=$(HELM) $(GO) test -count=1 $(strip $(GOTESTFLAGS) ./charts/...)

# HERALD_HELM is the pinned Helm for the lab's helm install/upgrade/
# uninstall test (e2e/lifecycle). E2E_TESTS are the e2e tests of make test
# in binary mode (the lab kubelet): layer 2, BGP, the nftables proxy, the
# controller, the partition (no address answered twice, none unanswered),
# the MetalLB migration, Pod Security, the monitoring files, and the
# benchmarks' short versions that fail on their targets (5 hard L2
# failovers, p99 <= 1 s; CPU stress, 0 election changes), and direct
# server return's (TestDSRFailover, TestDSRBGP: >= 99 % of 200 connections
# survive the L2 announcer's loss, herald's restart, an endpoint change,
# a BGP node's drain and its hard loss, none reset, the pods see the
# client; make bench runs them with SNAT beside), and the 5-minute churn
# soak (TestChurnSoak: 0 failed requests, 0 IP or election changes, RSS
# within +10 %; its failures were the test process's own stalls, and it
# now probes from lab-prober processes, docs/testing.md); the walkthrough,
# TestProxy and TestHelm run on real nodes (e2e-real-test). TestDrainL2
# and TestDrainBGP (herald drain, 0 failed requests under a 20 ms probe)
# are back in make test: the reset a run saw at the L2 hand-over on
# 2026-11-27 has not come back in 5 runs since, and a failure prints the
# client's captures (#36, docs/testing.md).
E2E_TESTS ?= ^(TestSpeakerL2|TestSpeakerBGP|TestProxyNFTables|TestController|TestFaultsNetworkPartition|TestMigrateFromMetalLB|TestPodSecurityAdmission|TestHelmPodSecurity|TestRules|TestPrometheusRuleIsRules|TestNamesExist|TestDashboard|TestL2FailoverTarget|TestL2UnderCPUStressTarget|TestSpeakerCPURequest|TestDSRFailover|TestDSRBGP|TestDrainL2|TestDrainBGP|TestL2MoveKeepsConnections|TestL2FalseDeathKeepsConnections|TestChurnSoak|TestSoakProbeServicesSpread)$$
E2E_PACKAGES ?= . ./lifecycle ./monitoring
e2e-test: toolchain helm ## the e2e tests of make test, E2E_TESTS in E2E_PACKAGES (needs root; make e2e-all runs every one)
	@if [ ! -f e2e/go.mod ]; then \
		echo "make: there is no e2e suite yet (e2e/, with the lab, arrives with issue #3): ran the unit tests only"; \
		exit 0; \
	fi; \
	if [ "$$(id -u)" -ne 0 ]; then \
		echo "make: the e2e suite (e2e/) needs root, it builds network namespaces: run make test as root (make unit-test runs the unit tests alone)" >&2; \
		exit 1; \
	fi; \
	echo "cd e2e && $(GO) run ./cmd/herald-lab build   # the lab's Kubernetes binaries, cached in e2e/_cache"; \
	(cd e2e && $(GO) run ./cmd/herald-lab build); \
	echo "cd e2e && HERALD_HELM=$(HELM) $(GO) test $(strip $(E2E_TESTFLAGS)) -run '$(E2E_TESTS)' $(E2E_PACKAGES)"; \
	cd e2e && ../hack/recap.sh e2e-test env HERALD_HELM=$(HELM) $(GO) test $(strip $(E2E_TESTFLAGS)) -run '$(E2E_TESTS)' $(E2E_PACKAGES)

# e2e-image-test runs the lab's image mode: herald's pods run the image
# `make image` built, under runc, with their securityContext and volumes,
# so a capability, tool or file the image lacks fails here as on a node.
# The tests are the user-facing ones: the walkthrough, layer 2, BGP, the
# proxy, and the kubelet API (kubectl exec and logs inside a herald
# container), the lab kubelet's init containers and sidecars, the images
# of Kubernetes' upstream e2e suite, and a subset of that suite with
# herald (TestUpstreamConformance; docs/testing.md); the lab's own tests
# among them are in e2e/labtest, run after the root package's (-p 1: each
# package brings up a lab, one at a time). It makes the upstream
# images first (e2e-images), which TestInitContainers and TestProbes only
# look for: on a fresh machine they run before anything else has made them.
# make e2e-all runs it after the binary-mode suite.
# E2E_FAULT_TESTS are the fault tests that run on herald's image too
# (issue #36): make e2e-all runs them in its image-mode and real-node
# passes. TestFaultsNetworkPartition makes a 4-node lab of its own, in
# the mode the pass asks for.
E2E_FAULT_TESTS := TestFaultsControlPlaneAPIServerDown|TestFaultsNetworkRouterRestart|TestFaultsNetworkNodeNotReady|TestFaultsNetworkPartition
E2E_IMAGE_TESTS ?= ^(TestSourceIPWalkthrough|TestSpeakerL2|TestSpeakerBGP|TestProxy|TestKubeletAPI|TestInitContainers|TestProbes|TestUpstreamImages|TestUpstreamConformance|TestL2MoveKeepsConnections|$(E2E_FAULT_TESTS))$$
e2e-image-test: toolchain ## (root) make image, then the walkthrough, the L2, BGP, proxy, kubelet API and init-container e2e tests, the upstream images and a subset of the upstream sig-network suite, with herald's pods running that image under runc
	@$(MAKE) image
	@$(MAKE) e2e-images
	(cd e2e && $(GO) run ./cmd/herald-lab build)
	cd e2e && ../hack/recap.sh e2e-image-test env HERALD_LAB_IMAGE=1 $(GO) test -count=1 -p 1 -timeout 70m -run '$(E2E_IMAGE_TESTS)' . ./labtest

# e2e-real-test runs the user-facing tests on real nodes: each lab node
# runs the real kubelet of the pinned release with its own containerd
# (built from its Go module), Debian's runc and CNI plugins, and herald is
# installed with its Helm chart from the image `make image` built
# (HERALD_LAB_REAL_NODES=1; package e2e/lab/realnode, docs/testing.md).
E2E_REAL_TESTS ?= ^(TestSourceIPWalkthrough|TestProxy)$$
E2E_REAL_LIFECYCLE_TESTS ?= ^TestHelm$$
e2e-real-test: toolchain helm ## (root) make image, then the walkthrough, the proxy and Helm e2e tests on real nodes (kubelet, containerd, runc, CNI plugins)
	@$(MAKE) image
	(cd e2e && $(GO) run ./cmd/herald-lab build)
	cd e2e && ../hack/recap.sh e2e-real-test env HERALD_LAB_REAL_NODES=1 HERALD_HELM=$(HELM) $(GO) test -count=1 -timeout 40m -run '$(E2E_REAL_TESTS)' .
	cd e2e && ../hack/recap.sh e2e-real-lifecycle-test env HERALD_LAB_REAL_NODES=1 HERALD_HELM=$(HELM) $(GO) test -count=1 -timeout 20m -run '$(E2E_REAL_LIFECYCLE_TESTS)' ./lifecycle

# compat runs the user-facing e2e tests on other Kubernetes releases: for
# each of COMPAT_VERSIONS (the oldest herald supports, its CRDs' CEL IP and
# CIDR libraries need v1.31; the pinned one; the newest the Go module proxy
# serves) the lab's control plane, kubelet, kube-proxy and kubectl are
# built from that k8s.io/kubernetes release (herald-lab build
# --k8s-version, a throwaway module per release under
# e2e/_cache/k8s-release; 30 minutes or more cold on 2 cores, as nothing of
# another release is in the build cache, then cached) and COMPAT_TESTS run
# in a lab kubelet lab with HERALD_LAB_K8S_VERSION set. Every release runs
# even when one fails; the logs are _output/logs/compat-<version>.log. Not
# in make test: too long. README's compatibility table holds the results
# (docs/testing.md).
K8S_PINNED := $(shell awk '$$1 == "k8s.io/kubernetes" && $$2 ~ /^v/ {print $$2; exit}' e2e/go.mod 2>/dev/null)
COMPAT_VERSIONS ?= v1.31.14 $(K8S_PINNED) v1.37.2
COMPAT_TESTS ?= ^(TestSourceIPWalkthrough|TestSpeakerL2|TestSpeakerBGP)$$
compat: toolchain helm ## (root) the walkthrough, TestSpeakerL2 and TestSpeakerBGP on each Kubernetes release of COMPAT_VERSIONS (not in make test)
	@if [ "$$(id -u)" -ne 0 ]; then echo "make compat: the lab needs root (network namespaces)" >&2; exit 1; fi
	@failed=; for v in $(COMPAT_VERSIONS); do 		echo "cd e2e && $(GO) run ./cmd/herald-lab build --k8s-version $$v"; 		if ! (cd e2e && $(GO) run ./cmd/herald-lab build --k8s-version $$v); then failed="$$failed $$v(build)"; continue; fi; 		echo "cd e2e && HERALD_LAB_K8S_VERSION=$$v $(GO) test -count=1 -timeout 40m -run '$(COMPAT_TESTS)' ."; 		(cd e2e && ../hack/recap.sh compat-$$v env HERALD_LAB_K8S_VERSION=$$v HERALD_HELM=$(HELM) $(GO) test -count=1 -timeout 40m -run '$(COMPAT_TESTS)' .) 			|| failed="$$failed $$v"; 	done; 	if [ -n "$$failed" ]; then echo "make compat: failed on$$failed" >&2; exit 1; fi; 	echo "make compat: passed on $(COMPAT_VERSIONS)"

# e2e-images makes the images Kubernetes' upstream e2e suite runs (agnhost,
# pause, busybox, nginx, regression-issue-74839, distroless-iptables,
# jessie-dnsutils) in root's podman storage under the references of the
# pinned framework, for the lab's image mode: from the pinned module's
# programs and Debian's packages, pause from e2e/cmd/pause (package
# e2e/lab/e2eimages; docs/testing.md). Each is built again only when its
# inputs changed. E2E_IMAGES_FLAGS: -only agnhost,pause, -rebuild.
E2E_IMAGES_FLAGS ?=
.PHONY: e2e-images
e2e-images: toolchain ## (root) build the images the upstream e2e suite runs (agnhost, pause, ...) into podman's storage for image mode
	cd e2e && $(GO) run ./cmd/e2e-images $(E2E_IMAGES_FLAGS)

# The lab's command, built from e2e/cmd/herald-lab.
HERALD_LAB := $(BIN)/herald-lab

$(HERALD_LAB): toolchain FORCE
	cd e2e && $(GO) build -o $(HERALD_LAB) ./cmd/herald-lab

.PHONY: FORCE
FORCE:

lab: toolchain ## (root) bring up the lab with herald from this tree, then walk through "Using Source IP"
	@if [ "$$(id -u)" -ne 0 ]; then echo "make lab: the lab needs root (network namespaces)" >&2; exit 1; fi
	(cd e2e && $(GO) run ./cmd/herald-lab build)
	@$(MAKE) $(HERALD_LAB)
	$(HERALD_LAB) up --reuse
	$(HERALD_LAB) walkthrough
	@echo; echo "The lab stays up: $(HERALD_LAB) status | exec node1 -- CMD | vtysh | down"

lab-down: ## (root) take the lab down
	@$(MAKE) $(HERALD_LAB)
	$(HERALD_LAB) down

# conformance runs Kubernetes' own sig-network e2e tests (e2e.test from the
# pinned module, cached in e2e/_cache) against an image-mode lab with
# cluster DNS, once with kube-proxy and once with herald as the service
# proxy, and prints the table test | kube-proxy | herald (also written to
# e2e/_cache/conformance/<time>/table.md). It fails when a test passes
# with kube-proxy and not with herald. CONFORMANCE_FLAGS: -procs, -focus,
# -skip, -proxies, -nodes (docs/testing.md). About 1.5 hours.
CONFORMANCE_FLAGS ?=
conformance: toolchain ## (root) the upstream sig-network e2e suite with kube-proxy, then with herald, and the table comparing them
	@$(MAKE) image
	cd e2e && $(GO) run ./cmd/conformance $(CONFORMANCE_FLAGS)

bench: toolchain ## benchmarks (not in CI): go test -bench, and the lab's benchmarks (root)
	$(GO) test -run '^$$' -bench . -benchmem ./...
	@echo "HERALD_BENCH_SCALE=1 $(GO) test -run '^\$$' -bench 'BenchmarkSyncScale/./nodes=1000' -benchtime 1x -benchmem -timeout 60m ./speaker/"
	HERALD_BENCH_SCALE=1 $(GO) test -run '^$$' -bench 'BenchmarkSyncScale/./nodes=1000' -benchtime 1x -benchmem -timeout 60m ./speaker/
	@echo "HERALD_BENCH_SCALE=1 $(GO) test -run '^\$$' -bench 'BenchmarkAnnouncementsAPI/././nodes=(100|1000)/' -benchtime 1x -timeout 60m ./speaker/"
	HERALD_BENCH_SCALE=1 $(GO) test -run '^$$' -bench 'BenchmarkAnnouncementsAPI/././nodes=(100|1000)/' -benchtime 1x -timeout 60m ./speaker/
	@echo "HERALD_BENCH=1 $(GO) test -count=1 -run '^TestBenchMemberlistScale\$$' -v -timeout 180m ./speaker/members/"
	HERALD_BENCH=1 $(GO) test -count=1 -run '^TestBenchMemberlistScale$$' -v -timeout 180m ./speaker/members/
	@if [ "$$(id -u)" -ne 0 ]; then echo "make bench: the lab benchmarks need root: skipped them" >&2; exit 0; fi; \
	echo "HERALD_BENCH=1 $(GO) test -count=1 -run '^TestBenchNFTApply$$' -v ./proxy/nft/"; \
	HERALD_BENCH=1 $(GO) test -count=1 -run '^TestBenchNFTApply$$' -v ./proxy/nft/ || exit 1; \
	echo "HERALD_BENCH=1 $(GO) test -count=1 -run '^TestBenchIPTRestore$$' -v -timeout 60m ./proxy/rules/"; \
	HERALD_BENCH=1 $(GO) test -count=1 -run '^TestBenchIPTRestore$$' -v -timeout 60m ./proxy/rules/ || exit 1; \
	(cd e2e && $(GO) run ./cmd/herald-lab build); \
	echo "cd e2e && HERALD_BENCH=1 $(GO) test -count=1 -run '^TestBench' -skip '^TestBenchChurnSoak$$' -v -timeout 180m ."; \
	(cd e2e && HERALD_BENCH=1 $(GO) test -count=1 -run '^TestBench' -skip '^TestBenchChurnSoak$$' -v -timeout 180m .) || exit 1; \
	echo "cd e2e && HERALD_BENCH=1 $(GO) test -count=1 -run '^TestBenchChurnSoak$$' -v -timeout 80m ."; \
	(cd e2e && HERALD_BENCH=1 $(GO) test -count=1 -run '^TestBenchChurnSoak$$' -v -timeout 80m .) || exit 1; \
	echo "cd e2e && HERALD_BENCH=1 HERALD_LAB_NODES=10 $(GO) test -count=1 -run '^TestBenchL2Failover$$' -v -timeout 90m ."; \
	cd e2e && HERALD_BENCH=1 HERALD_LAB_NODES=10 $(GO) test -count=1 -run '^TestBenchL2Failover$$' -v -timeout 90m .

lint: toolchain ## gofmt, go vet and staticcheck (when it can be installed)
	@echo "gofmt -l"; \
	files=$$(find . \( -path ./.git -o -path ./bin -o -path ./_output -o -path ./e2e/_cache \) -prune -o -name '*.go' -print); \
	bad=$$(if [ -n "$$files" ]; then gofmt -l $$files; fi); \
	if [ -n "$$bad" ]; then echo "make lint: these files are not gofmt'ed (run gofmt -w on them):" >&2; echo "$$bad" >&2; exit 1; fi
	$(GO) vet ./...
	@if [ -f e2e/go.mod ]; then echo "cd e2e && $(GO) vet ./..."; cd e2e && $(GO) vet ./...; fi
	@if ! $(MAKE) tools; then \
		echo "make lint: WARNING: staticcheck $(STATICCHECK_VERSION) could not be installed: skipped it (gofmt and go vet passed)"; \
		exit 0; \
	fi; \
	echo "staticcheck ./..."; $(STATICCHECK) ./...; \
	if [ -f e2e/go.mod ]; then echo "cd e2e && staticcheck ./..."; cd e2e && $(STATICCHECK) ./...; fi

fuzz: toolchain ## the long run: every fuzz target for FUZZTIME (default 60s) each, one at a time
	FUZZTIME=$(FUZZTIME) GO=$(GO) bash hack/fuzz.sh

# fuzz-short is make test's pass over the fuzz targets (as root it also
# has iptables-restore --test check the rendered rules; proxy/rules).
fuzz-short: toolchain ## every fuzz target for SHORT_FUZZTIME (10s) each, as make test runs it
	FUZZTIME=$(SHORT_FUZZTIME) FUZZMINIMIZETIME=$(SHORT_FUZZMINIMIZETIME) GO=$(GO) bash hack/fuzz.sh

clean: ## remove bin/ and _output/
	rm -rf bin _output
