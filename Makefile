# hermes-bridge. `make test` is what CI runs (.ci/run).
GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 30s
SEEDS     ?= 5000
FROM      ?= 1
MUTANT_SEEDS ?= 3000
TEST_TIMEOUT ?= 15m
# The version `hermes-bridge version` prints: git describe of this clone, else the
# module's build info (see versionFrom in cmd/hermes-bridge/help.go).
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS   := $(if $(VERSION),-X main.version=$(VERSION))
# Modules nested in the repository, each with its own go.mod (so its dependencies stay out
# of the service's): test, test-short, vet, staticcheck and tidy-check run in each as well.
# deploy/image: the image builder on go-containerregistry; e2e/browser: the dashboard's
# headless-Chromium tests (chromedp), run against the real binary.
SUBMODULES ?= deploy/image e2e/browser
# Modules that only pin a tool (no packages of their own): tidy-check covers them.
# e2e/natscli: the nats CLI the documents' examples are run with (e2e/natscli_test.go).
TOOLMODULES ?= e2e/natscli

.PHONY: ui-vendor ui-test chaos sim mutants image docker-image all build install test test-short lint vet fmt-check staticcheck tidy-check fuzz run demo bench soak clean help

all: build

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## compile every binary into ./bin, version stamped
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ ./cmd/...

# install copies what build made, so that `make install`, `make run` and `make demo` share one
# build: go build skips the link when ./bin is up to date (same sources, same flags).
install: build ## build, then copy ./bin/hermes-bridge and ./bin/fake-hermes into $(go env GOBIN) or $(go env GOPATH)/bin
	@dir=$$($(GO) env GOBIN); dir=$${dir:-$$($(GO) env GOPATH)/bin}; \
	mkdir -p "$$dir" && install -m 0755 bin/hermes-bridge bin/fake-hermes "$$dir" && \
	echo "installed hermes-bridge and fake-hermes in $$dir"; \
	case ":$$PATH:" in *":$$dir:"*) ;; *) echo "$$dir is not on your PATH: export PATH=\"$$dir:\$$PATH\"";; esac

# The nested modules' tests run beside the module's (they mostly wait on builds and processes),
# and make test fails if any of them fails.
test: tidy-check vet fmt-check staticcheck ## tidy check, vet, gofmt check, staticcheck, and every test with -race, the nested modules' too (what CI runs)
	@pids=; for m in $(SUBMODULES); do $(GO) -C $$m test -race -count=1 -timeout $(TEST_TIMEOUT) ./... & pids="$$pids $$!"; done; \
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS); st=$$?; \
	for p in $$pids; do wait $$p || st=1; done; exit $$st

test-short: ## quick tests without the e2e suite
	$(GO) test -race -count=1 -short $(PKGS)
	for m in $(SUBMODULES); do $(GO) -C $$m test -race -count=1 -short ./... || exit 1; done

vet: ## go vet
	$(GO) vet $(PKGS)
	for m in $(SUBMODULES); do $(GO) -C $$m vet ./... || exit 1; done

fmt-check: ## fail if gofmt would change a file
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

staticcheck: ## staticcheck (go tool, pinned in go.mod), plain and with the soak and faulthooks tags; the nested modules with the same binary
	$(GO) tool staticcheck $(PKGS)
	$(GO) tool staticcheck -tags soak,faulthooks $(PKGS)
	sc=$$($(GO) tool -n staticcheck) && for m in $(SUBMODULES); do (cd $$m && $$sc ./...) || exit 1; done

tidy-check: ## fail if go mod tidy would change go.mod or go.sum (of the module or a nested one, tool modules included)
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	@for m in $(SUBMODULES) $(TOOLMODULES); do $(GO) -C $$m mod tidy -diff || { echo "$$m/go.mod or go.sum are not tidy: run go mod tidy in $$m"; exit 1; }; done

lint: vet fmt-check staticcheck ## go vet + gofmt + staticcheck (+ golangci-lint when installed)
	@if command -v golangci-lint >/dev/null 2>&1; then golangci-lint run $(PKGS) && for m in $(SUBMODULES); do (cd $$m && golangci-lint run ./...) || exit 1; done; else echo "golangci-lint not installed; ran go vet, gofmt and staticcheck only"; fi

fuzz: ## run every fuzz target for FUZZTIME each (not part of make test)
	$(GO) test -run '^$$' -fuzz '^FuzzSSEReader$$' -fuzztime $(FUZZTIME) ./hermes
	$(GO) test -run '^$$' -fuzz '^FuzzPrepare$$' -fuzztime $(FUZZTIME) ./hermes
	$(GO) test -run '^$$' -fuzz '^FuzzRunEvents$$' -fuzztime $(FUZZTIME) ./hermes
	$(GO) test -run '^$$' -fuzz '^FuzzParseUsage$$' -fuzztime $(FUZZTIME) ./hermes
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEnvelope$$' -fuzztime $(FUZZTIME) ./events
	$(GO) test -run '^$$' -fuzz '^FuzzCanonicalize$$' -fuzztime $(FUZZTIME) ./events
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeAction$$' -fuzztime $(FUZZTIME) ./events
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeApproval$$' -fuzztime $(FUZZTIME) ./events
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeSteer$$' -fuzztime $(FUZZTIME) ./events
	$(GO) test -run '^$$' -fuzz '^FuzzValidateAction$$' -fuzztime $(FUZZTIME) ./schemas
	$(GO) test -run '^$$' -fuzz '^FuzzPrepareSchemaValid$$' -fuzztime $(FUZZTIME) ./schemas
	$(GO) test -run '^$$' -fuzz '^FuzzParseMatchesEncodingJSON$$' -fuzztime $(FUZZTIME) ./schemas
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeOutput$$' -fuzztime $(FUZZTIME) ./events
	$(GO) test -run '^$$' -fuzz '^FuzzEncodeResult$$' -fuzztime $(FUZZTIME) ./events
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRecord$$' -fuzztime $(FUZZTIME) ./kvstore
	$(GO) test -run '^$$' -fuzz '^FuzzParseAck$$' -fuzztime $(FUZZTIME) ./kvstore

sim: ## the action core's deterministic simulator over many seeds (SEEDS=5000 from FROM=1, about 40 s with -race; make test runs 300); a failing seed prints the command that replays it
	$(GO) test -race -count=1 -run '^TestSim$$' -timeout 0 ./bridge/core/sim -sim.seeds=$(SEEDS) -sim.from=$(FROM)

mutants: ## plant bugs in the core, one per class of promise and one per bug the simulator found, and want the simulator to catch each (MUTANT_SEEDS=3000; about 20 min on 2 cores)
	$(GO) test -count=1 -run '^TestMutants$$' -timeout 0 -v ./bridge/core/sim -sim.mutants -sim.mutant-seeds=$(MUTANT_SEEDS)

soak: ## load soak (not in make test): SOAK_DURATION=2m SOAK_RATE=200 SOAK_REPLICAS=3 SOAK_KILL_EVERY=30s
	$(GO) test -race -count=1 -tags soak -run '^TestSoak$$' -timeout 0 -v ./e2e

# chaos: real processes on a real cluster, not part of make test. Three nats-server processes
# (built from the module in go.mod), three `hermes-bridge run` replicas with R3 streams and
# bucket, and the fake Hermes; seeded rounds of mixed load (chat, chat_stream, models, run; ~10%
# duplicate keys, ~3% re-published action ids) while NATS nodes (mostly stream leaders) and
# replicas are SIGKILLed or SIGSTOPped and SIGCONTed, with one full cluster restart in one round.
# Target, every round: 0 missing results, 0 duplicated results, 0 duplicate Hermes calls per
# action id and per idempotency key, 0 events out of order, no failure other than
# outcome_unknown, and outcome_unknown only for a call in flight on a replica that was SIGKILLed
# or paused past its lease. Exits 1 when a target is missed. Prints a Markdown table.
CHAOS_FLAGS ?= -rounds 5 -seed 1 -duration 30s
chaos: ## NATS cluster + bridge processes under SIGKILL/SIGSTOP, seeded rounds (~6 min; CHAOS_FLAGS="-rounds 5 -seed 1 -duration 30s")
	$(GO) run ./e2e/chaos $(CHAOS_FLAGS)

# ui-vendor: the dashboard's NATS JavaScript client (bridge/ui/assets/nats.js, committed) from
# the versions pinned in bridge/ui/package-lock.json: npm ci, then esbuild bundles and minifies
# it. Needs node and npm (the npm registry); make test never runs it. See bridge/ui/README.md.
ui-vendor: ## rebuild bridge/ui/assets/nats.js from bridge/ui/package-lock.json (npm ci + esbuild; not in make test)
	cd bridge/ui && npm ci --no-audit --no-fund && npm run vendor

ui-test: ## the dashboard's tests: handler units, then the headless-Chromium tests of e2e/browser (needs chromium: apt-get install -y chromium chromium-driver)
	$(GO) test -race -count=1 ./bridge/ui
	cd e2e/browser && HERMES_BRIDGE_UI_TEST=require $(GO) test -race -count=1 -run '^TestDashboardBrowser' -v ./...

# run builds (a no-op when ./bin is up to date), then runs the binary: under `go run`,
# Ctrl-C made the go command exit 1 after the bridge's clean shutdown, and make report
# "Error 1".
run: build ## run the bridge on its embedded NATS server (endpoints from the environment)
	./bin/hermes-bridge run

demo: ## build as make build does, run the bridge against cmd/fake-hermes and send one streaming action
	./deploy/demo.sh

bench: ## bridge vs its floors (NATS, Hermes) side by side, and as its own process (RSS); table + bench.json + bench.md (~3 min; go run ./e2e/bench -help)
	$(GO) run ./e2e/bench -json bench.json -markdown bench.md

# image: the container image without Docker (deploy/image, its own module, on
# go-containerregistry): an OCI archive with one image per platform in one index, the binary
# cross-compiled static, the config of deploy/Dockerfile's final stage. Reproducible: every
# timestamp is SOURCE_DATE_EPOCH, else HEAD's commit time.
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
IMAGE_OUT ?= bin/hermes-bridge-oci.tar
image: ## container image without Docker: OCI archive bin/hermes-bridge-oci.tar, linux/amd64 + arm64 (IMAGE_PLATFORMS=...; not in make test)
	$(GO) -C deploy/image run . -o $(abspath $(IMAGE_OUT)) -platforms $(IMAGE_PLATFORMS) $(if $(VERSION),-version $(VERSION))

# docker-image: the same image from deploy/Dockerfile, with a Docker daemon (BuildKit).
IMAGE_NAME ?= hermes-bridge
docker-image: ## docker build -f deploy/Dockerfile, tagged hermes-bridge:<version> (needs a Docker daemon; not in make test)
	@command -v docker >/dev/null 2>&1 || { echo "docker is not installed; 'make image' builds the same image without Docker"; exit 1; }
	@docker info >/dev/null 2>&1 || { echo "docker cannot reach a daemon ('docker info' fails); start one, or 'make image' builds the same image without Docker"; exit 1; }
	docker build -f deploy/Dockerfile --build-arg VERSION=$(or $(VERSION),dev) \
		--build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null) -t $(IMAGE_NAME):$(or $(subst +,_,$(VERSION)),dev) .

clean: ## remove build output
	rm -rf bin
