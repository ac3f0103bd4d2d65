# sandgate — the two commands of the README are `make demo` and `make test`.
#
#   make demo   build bin/caddy from xcaddy.toml and run the main job: the gateway
#               with Caddyfile.example, a fixed entry + execd stand-in, and a
#               short E2B JS SDK session through it
#   make test   install what the tests need, build, and run every test
#   make bench  the benchmarks written down in docs/benchmarks.md

GO       ?= go
NPM      ?= npm
JS_DIR   := integration/js
# What the gateway binary is built from: non-test Go files outside integration/.
GATEWAY_SOURCES := $(shell find . -name '*.go' -not -name '*_test.go' -not -path './integration/*' -not -path './.git/*') go.mod go.sum xcaddy.toml

.PHONY: all build demo test test-unit test-integration js-deps bench vet clean

all: build

# The gateway: one caddy binary built by xcaddy with our modules.
bin/caddy: $(GATEWAY_SOURCES)
	$(GO) run ./hack/buildgateway -manifest xcaddy.toml

build: bin/caddy

# The pinned E2B JS SDKs the integration tests and the demo drive.
$(JS_DIR)/node_modules/.package-lock.json: $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	cd $(JS_DIR) && $(NPM) ci --no-audit --no-fund

js-deps: $(JS_DIR)/node_modules/.package-lock.json

demo: build js-deps
	$(GO) run ./integration/cmd/demo

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1; }

test-unit:
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /integration$$)

test-integration: build js-deps
	$(GO) test -count=1 -timeout 20m ./integration/

test: vet build js-deps
	$(GO) test -count=1 -timeout 30m ./...

bench: build js-deps
	$(GO) test -run '^$$' -bench . -benchtime 5s -timeout 30m ./integration/

clean:
	rm -rf bin $(JS_DIR)/node_modules
