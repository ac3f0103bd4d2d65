# sandgate — the two commands of the README are `make demo` and `make test`.
#
#   make demo   build bin/caddy from xcaddy.toml and run the main job: the gateway
#               with Caddyfile.example, a fixed entry + execd stand-in, and a
#               short E2B JS SDK session through it
#   make test   install what the tests need, build, and run every test
#   make bench  the benchmarks written down in docs/
#   make nodeload  the node-connect load test, pinned: gateway on CPU 0, the rest on 1
#               (docs/node-connect.md)
#   make fuzz   every Go fuzz target for FUZZTIME each (default 30s)
#   make images the container images of the three programs (docs/deploy.md)
#   make generate  regenerate the DeepCopy functions and CRD manifests of the API
#               types with controller-gen (docs/deploy.md "Generated files")
#   make chart  package the Helm chart with the version stamp (docs/deploy.md "Helm")

GO       ?= go
NPM      ?= npm
JS_DIR   := integration/js

# What the gateway binary is built from: non-test Go files of the module, outside
# the parts that are not in the gateway.
GATEWAY_SOURCES := $(shell find . -name '*.go' -not -name '*_test.go' -not -path './integration/*' \
	-not -path './corectl/*' -not -path './nodeagent/*' -not -path './hack/kube/*' -not -path './hack/nodeload/*' -not -path './hack/gatewaybench/*' \
	-not -path './hack/attack/*' -not -path './hack/gatewayproc/*' -not -path './hack/fuzz/*' \
	-not -path './node/sim/*' -not -path './.git/*') \
	go.mod go.sum xcaddy.toml

# Each step of `make test` and `make demo` runs under hack/phase.sh, which prints
# what it is doing and how long it usually takes, a line a minute while it runs,
# and its duration. The figures are measured on 2 cores (README "The two commands").
PHASE := bash hack/phase.sh
SUBMAKE := $(MAKE) --no-print-directory -s

# The services the tests use, each started or built once and reused:
#   hack/docker/start.sh  installs docker.io + busybox-static if missing (apt's output in
#                         /tmp/sandgate-docker/apt-get.log), starts a private dockerd under
#                         /tmp/sandgate-docker, prints its DOCKER_HOST
#   hack/kube/build.sh    builds kube-apiserver + etcd from the Go module proxy into
#                         ~/.cache/sandgate, prints the directory
#   hack/browser/chromium.sh  installs Debian's chromium if missing (apt's output in
#                         /tmp/sandgate-chromium/apt-get.log), prints its path
#   hack/monitoring/promtool.sh  installs Debian's prometheus (for promtool) if missing, with
#                         its server kept stopped and disabled, and checks the alert rules
# $(call docker_env,<phase label>) and $(call kube_env,<phase label>) run them as a phase and
# export DOCKER_HOST and KUBEBUILDER_ASSETS in the recipe's shell; $(call chromium_env,…)
# exports SANDGATE_CHROMIUM.
docker_env = docker_host="$$($(PHASE) $(1) "starting the private Docker engine (hack/docker/start.sh)" \
	"first time 1-2 min with apt-get install docker.io busybox-static; then about a second" -- bash hack/docker/start.sh)"; \
	export DOCKER_HOST="$$docker_host"
chromium_env = chromium="$$($(PHASE) $(1) "finding Chromium for the browser test (hack/browser/chromium.sh)" \
	"first time about a minute with apt-get install chromium; then nothing" -- bash hack/browser/chromium.sh)"; \
	export SANDGATE_CHROMIUM="$$chromium"
kube_env = kube_assets="$$($(PHASE) $(1) "building kube-apiserver and etcd for envtest, and kubectl of their version for deploy's prune test (hack/kube/build.sh, hack/kube/kubectl.sh)" \
	"first time 8-10 min on 2 idle cores, 35 on a loaded machine; then cached" -- \
	bash -c 'bash hack/kube/kubectl.sh >/dev/null && bash hack/kube/build.sh')"; \
	export KUBEBUILDER_ASSETS="$$kube_assets"
# The real-peer tier (README "The real-peer tier", integration/realpeers): when SANDGATE_PEERS
# names the upstream archives, $(call peers_env,<label>,<label>) builds the real OpenSandbox
# programs (hack/peers/build.sh) and installs Debian's Python packages for the E2B Python SDK
# (hack/peers/python.sh), as two phases, and exports SANDGATE_PEERS_BIN and
# SANDGATE_PEERS_PYTHON; without it, it prints one line saying the tier is off and how to turn
# it on (the tier's tests then skip).
peers_off = real-peer tier off: set SANDGATE_PEERS to the directory of the OpenSandbox and E2B Python SDK archives to run it (README \"The real-peer tier\")
peers_env = if [ -n "$${SANDGATE_PEERS:-}" ]; then \
	peers_bin="$$($(PHASE) $(1) "building the real OpenSandbox execd, Ingress, controller and kwok (hack/peers/build.sh)" \
	"first time about 10 min on 2 idle cores, 20-30 loaded; then a second" -- bash hack/peers/build.sh)"; \
	export SANDGATE_PEERS_BIN="$$peers_bin"; \
	peers_python="$$($(PHASE) $(2) "installing Debian's Python packages for the E2B Python SDK (hack/peers/python.sh)" \
	"first time about a minute with apt-get; then nothing" -- bash hack/peers/python.sh)"; \
	export SANDGATE_PEERS_PYTHON="$$peers_python"; \
	else echo "==> [$(1)] $(peers_off)" >&2; echo "==> [$(2)] skipped (the real-peer tier is off)" >&2; fi

.PHONY: all build images demo test test-unit test-integration js-deps bench nodeload fuzz vet rules generate generate-check chart chart-sync helm-check clean FORCE

all: build

# The version stamp of the three binaries (hack/version.sh, package internal/version):
# rewritten only when it changes, so a new commit relinks them with the right commit.
bin/.version: FORCE
	@mkdir -p bin; v="$$(bash hack/version.sh)"; [ "$$v" = "$$(cat $@ 2>/dev/null)" ] || printf '%s\n' "$$v" >$@

# The gateway: one caddy binary built by xcaddy with our modules. xcaddy's output
# (about a hundred lines) goes to bin/caddy-build.log; its end is shown on failure.
bin/caddy: $(GATEWAY_SOURCES) bin/.version
	@echo "    building bin/caddy (xcaddy's output in bin/caddy-build.log)" >&2
	@$(GO) run ./hack/buildgateway -manifest xcaddy.toml -ldflags "$$(cat bin/.version)" >bin/caddy-build.log 2>&1 || \
		{ tail -n 30 bin/caddy-build.log >&2; echo "bin/caddy: the build failed; the whole log is bin/caddy-build.log" >&2; exit 1; }

# What bin/corectl and bin/nodeagent are built from: every file, tests and testdata aside,
# of the product's folder and of the wings it may import (gateway/, node/, nodecore/, internal/;
# a product never imports another product, docs/architecture.md), so that a change in
# any package the command imports (gateway/authorizer for corectl, node/release for
# nodeagent) or in an embedded file (corectl's openapi.json) rebuilds it. A change in a
# wing package the command does not import relinks it needlessly: a few seconds.
product_files = $(shell find $(1) gateway node nodecore internal -type f -not -name '*_test.go' -not -path '*/testdata/*')

bin/corectl: $(call product_files,corectl) go.mod go.sum bin/.version
	CGO_ENABLED=0 $(GO) build -ldflags "$$(cat bin/.version)" -o bin/corectl ./corectl/cmd/corectl

bin/nodeagent: $(call product_files,nodeagent) go.mod go.sum bin/.version
	CGO_ENABLED=0 $(GO) build -ldflags "$$(cat bin/.version)" -o bin/nodeagent ./nodeagent/cmd/nodeagent

build: bin/caddy bin/corectl bin/nodeagent

# The container images of the three programs, sandgate/{gateway,corectl,nodeagent}:$(IMAGE_TAG),
# built in the Docker engine of DOCKER_HOST (or the default socket) by hack/images.sh: FROM
# scratch with the static binaries, Debian's CA bundle and the non-root user 65532; no registry
# is contacted (docs/deploy.md). Each is also tagged with the build's version stamp
# (bash hack/version.sh --tag), the appVersion `make chart` gives the Helm chart.
IMAGE_TAG ?= dev
images: build
	IMAGE_TAG=$(IMAGE_TAG) IMAGE_VERSION_TAG=1 bash hack/images.sh

# The Helm chart deploy/chart/sandgate (docs/deploy.md "Helm"), with helm pinned in
# hack/helm/go.mod and built once into ~/.cache/sandgate (hack/helm/build.sh):
#   chart        package it into bin/chart/ with appVersion = the version stamp
#                (bash hack/version.sh --tag), the images' tag from `make images`
#   chart-sync   copy the files it shares with deploy/ into it (CRDs, the gateway's
#                Caddyfile set, corectl's clusters.yaml, deploy/monitoring's objects,
#                tls-caddy's tls.caddyfile)
#   helm-check   (run by vet) the copies are current, helm lint --strict and helm template
#                with the default values, ci/all-on-values.yaml and ci/tls-caddy-values.yaml
chart:
	@mkdir -p bin/chart
	"$$(bash hack/helm/build.sh)" package deploy/chart/sandgate --app-version "$$(bash hack/version.sh --tag)" --destination bin/chart

chart-sync:
	bash hack/helm/sync.sh

helm-check:
	GO=$(GO) bash hack/helm/check.sh

# The pinned E2B JS SDKs the integration tests and the demo drive.
$(JS_DIR)/node_modules/.package-lock.json: $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	cd $(JS_DIR) && $(NPM) ci --no-audit --no-fund >&2

js-deps: $(JS_DIR)/node_modules/.package-lock.json

demo:
	@$(PHASE) 1/3 "building bin/caddy with xcaddy" "first time 3-5 min on idle cores, 15 loaded; then nothing, or about 40 s after a change" -- $(SUBMAKE) bin/caddy
	@$(PHASE) 2/3 "installing the E2B JS SDKs (npm ci in integration/js)" "first time 5-30 s; then nothing" -- $(SUBMAKE) js-deps
	@$(PHASE) 3/3 "running the demo (go run ./integration/cmd/demo)" "a few seconds; about 20 s when Go must first compile it" -- $(GO) run ./integration/cmd/demo

# The Prometheus alert rules of deploy/monitoring: promtool check rules and promtool test
# rules (Debian's prometheus package, installed if missing; docs/runbook.md "Alerts").
rules:
	bash hack/monitoring/promtool.sh

# The generated Kubernetes files: zz_generated.deepcopy.go of corectl/apis/v1alpha1 and
# nodecore/apis/v1alpha1, and the CRD manifests in deploy/compute/crds/ and deploy/portal/crds/,
# made by controller-gen (pinned in hack/controllergen/go.mod) from the types' +kubebuilder
# markers. generate-check (run by vet, so by make test and CI) regenerates them into the
# tree and fails, showing the difference, when that changed anything: the files were stale.
generate:
	GO=$(GO) bash hack/controllergen/generate.sh
	bash hack/helm/sync.sh

generate-check:
	GO=$(GO) bash hack/controllergen/generate.sh --check

vet: generate-check helm-check
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1; }

test-unit: build
	@set -e; $(call chromium_env,chromium); $(call docker_env,docker); $(call kube_env,kube); GO=$(GO) bash hack/gotest/gotest.sh -count=1 -timeout 30m $$($(GO) list ./... | grep -v /integration)

test-integration: build js-deps
	@set -e; $(call chromium_env,chromium); $(call docker_env,docker); $(call kube_env,kube); $(call peers_env,peers,python); \
	GO=$(GO) bash hack/gotest/gotest.sh -count=1 -timeout 30m ./integration/...

test:
	@$(PHASE) 1/13 "downloading Go modules (go mod download)" "first time about 1 min; then nothing" -- $(GO) mod download
	@$(PHASE) 2/13 "checking the generated files (make generate-check), the Helm chart (make helm-check), gofmt, and running go vet ./..." "first time it builds controller-gen (about 2 min) and helm (about 3 min), and compiles every dependency: 5-10 min on idle cores, up to an hour on a loaded machine; then 1-2 min" -- $(SUBMAKE) vet
	@$(PHASE) 3/13 "building bin/caddy with xcaddy (hack/buildgateway)" "first time 3-5 min on idle cores, 15 loaded; then nothing, or about 40 s after a change or a new commit" -- $(SUBMAKE) bin/caddy
	@$(PHASE) 4/13 "building bin/corectl and bin/nodeagent" "first time about 10 s (phase 2 compiled the dependencies); then nothing, or under a minute" -- $(SUBMAKE) bin/corectl bin/nodeagent
	@$(PHASE) 5/13 "installing the E2B JS SDKs (npm ci in integration/js)" "first time 5-30 s; then nothing" -- $(SUBMAKE) js-deps
	@$(PHASE) 6/13 "checking the alert rules with promtool (hack/monitoring/promtool.sh)" "first time about a minute with apt-get install prometheus; then a second" -- bash hack/monitoring/promtool.sh
	@set -e; $(call chromium_env,7/13); $(call docker_env,8/13); $(call kube_env,9/13); $(call peers_env,10/13,11/13); \
	echo "    DOCKER_HOST=$$DOCKER_HOST KUBEBUILDER_ASSETS=$$KUBEBUILDER_ASSETS SANDGATE_PEERS_BIN=$${SANDGATE_PEERS_BIN:-}" >&2; \
	$(PHASE) 12/13 "running go test ./... (unit, integration with the SDKs, Docker and kube-apiserver)" \
		"about 6-20 min; a line per package as each finishes, and on a failure a summary of what failed" -- \
		env GO=$(GO) bash hack/gotest/gotest.sh -count=1 -timeout 45m $$($(GO) list ./... | grep -v /integration/realpeers); \
	$(PHASE) 13/13 "running the real-peer tier (hack/peers/test.sh: go test -v ./integration/realpeers)" \
		"about 2 min; a line per test; without SANDGATE_PEERS every test skips, saying so" -- bash hack/peers/test.sh

bench: build
	$(GO) run ./hack/gatewaybench -caddy bin/caddy
	$(GO) test -run '^$$' -bench . -benchtime 5s ./nodecore/hub/
	@set -e; $(call kube_env,kube); $(GO) test -run '^$$' -bench . -benchtime 1000x -timeout 30m ./corectl/controller/

# Holds 10,000 simulated nodes on the built gateway and dispatches 1,000 ops/s
# (docs/node-connect.md "Figures"), pinned: the tool runs under taskset -c 1 (the
# simulated nodes' process inherits it) and re-pins the gateway's threads to CPU 0,
# so the gateway has a core of its own. It prints the hub's own time (p99, p99.9)
# beside the round trips. NODELOAD_FLAGS changes the load (e.g. -rate 5000).
# NODELOAD_GATEWAY_ENV is the gateway's environment: by default the runtime setting
# the gateway's image carries (docs/deploy.md "Memory, garbage collection and runtime
# settings"), so the run measures the gateway as it ships; NODELOAD_GATEWAY_ENV= gives
# it Go's defaults, and a -gateway-env in NODELOAD_FLAGS replaces it (-variant sets
# each variant's own).
NODELOAD_FLAGS ?= -nodes 10000 -rate 1000 -duration 30s
NODELOAD_GATEWAY_ENV ?= GODEBUG=schedtrace=86400000
nodeload: bin/caddy
	$(GO) build -o bin/nodeload ./hack/nodeload
	taskset -c 1 bin/nodeload -caddy bin/caddy -pin-gateway 0 $(if $(NODELOAD_GATEWAY_ENV),-gateway-env $(NODELOAD_GATEWAY_ENV)) $(NODELOAD_FLAGS)

# Every fuzz target of the module, FUZZTIME each; hack/fuzz/run.sh finds them
# (`go test -list '^Fuzz'`), so a new target is included without a change here.
# CI runs it with FUZZTIME=3s after the tests.
FUZZTIME ?= 30s
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) bash hack/fuzz/run.sh

clean:
	rm -rf bin $(JS_DIR)/node_modules
