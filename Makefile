# sandgate — the two commands of the README are `make demo` and `make test`.
#
#   make demo   build bin/caddy from xcaddy.toml and run the main job: the gateway
#               with Caddyfile.example, a fixed entry + execd stand-in, and a
#               short E2B JS SDK session through it
#   make test   install what the tests need, build, and run every test
#   make bench  the benchmarks written down in docs/
#   make nodeload  the node-connect load test (docs/node-connect.md)
#   make fuzz   every Go fuzz target for FUZZTIME each (default 30s)

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

# The services the tests use, each started or built once and reused:
#   hack/docker/start.sh  installs docker.io + busybox-static if missing, starts a private
#                         dockerd under /tmp/sandgate-docker, prints its DOCKER_HOST
#   hack/kube/build.sh    builds kube-apiserver + etcd from the Go module proxy into
#                         ~/.cache/sandgate (5-10 min the first time), prints the directory
KUBE_ENV = kube_assets="$$(bash hack/kube/build.sh)"; export KUBEBUILDER_ASSETS="$$kube_assets"
TEST_ENV = docker_host="$$(bash hack/docker/start.sh)"; export DOCKER_HOST="$$docker_host"; $(KUBE_ENV)

.PHONY: all build demo test test-unit test-integration js-deps bench nodeload fuzz vet clean

all: build

# The gateway: one caddy binary built by xcaddy with our modules.
bin/caddy: $(GATEWAY_SOURCES)
	$(GO) run ./hack/buildgateway -manifest xcaddy.toml

bin/corectl: $(shell find corectl gateway/credential gateway/token internal -name '*.go' -not -name '*_test.go') go.mod go.sum
	$(GO) build -o bin/corectl ./corectl/cmd/corectl

bin/nodeagent: $(shell find nodeagent node/proto -name '*.go' -not -name '*_test.go') go.mod go.sum
	$(GO) build -o bin/nodeagent ./nodeagent/cmd/nodeagent

build: bin/caddy bin/corectl bin/nodeagent

# The pinned E2B JS SDKs the integration tests and the demo drive.
$(JS_DIR)/node_modules/.package-lock.json: $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	cd $(JS_DIR) && $(NPM) ci --no-audit --no-fund

js-deps: $(JS_DIR)/node_modules/.package-lock.json

demo: bin/caddy js-deps
	$(GO) run ./integration/cmd/demo

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1; }

test-unit: bin/caddy
	@set -e; $(TEST_ENV); $(GO) test -count=1 -timeout 30m $$($(GO) list ./... | grep -v /integration)

test-integration: build js-deps
	@set -e; $(KUBE_ENV); $(GO) test -count=1 -timeout 20m ./integration/...

test: vet build js-deps
	@set -e; $(TEST_ENV); echo "DOCKER_HOST=$$DOCKER_HOST KUBEBUILDER_ASSETS=$$KUBEBUILDER_ASSETS"; \
	$(GO) test -count=1 -timeout 45m ./...

bench: build
	$(GO) run ./hack/gatewaybench -caddy bin/caddy
	$(GO) test -run '^$$' -bench . -benchtime 5s ./node/hub/
	@set -e; $(KUBE_ENV); $(GO) test -run '^$$' -bench . -benchtime 1000x -timeout 30m ./corectl/controller/

# Holds 10,000 simulated nodes on the built gateway and dispatches 1,000 ops/s
# (docs/node-connect.md).
nodeload: bin/caddy
	$(GO) run ./hack/nodeload -caddy bin/caddy -nodes 10000 -rate 1000 -duration 30s

# Every fuzz target of the module, FUZZTIME each; hack/fuzz/run.sh finds them
# (`go test -list '^Fuzz'`), so a new target is included without a change here.
# CI runs it with FUZZTIME=3s after the tests.
FUZZTIME ?= 30s
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) bash hack/fuzz/run.sh

clean:
	rm -rf bin $(JS_DIR)/node_modules
