# Hangar — make help lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO        ?= go
BIN       := bin
TESTBED   := scripts/testbed.sh
ENDPOINTS := .cache/testbed/endpoints.env
# Binaries that exist so far (each lands with its issue); build builds every cmd/*/ with a main.go.
CMDS      := $(patsubst cmd/%/main.go,%,$(wildcard cmd/*/main.go))
ARCHES    := amd64 arm64
# The action's release assets (make dist): what scripts/action.sh downloads. Each command's
# asset is hangar-<command>-<os>-<arch>, but hangar's (which runs mode: refresh) is hangar-<os>-<arch>.
DIST_CMDS      := provision release hangar
DIST_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
LDFLAGS   := -s -w -X main.version=$(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

TOOLS_BIN := .cache/tools/bin
GOLANGCI  := $(TOOLS_BIN)/golangci-lint
ACT       := $(TOOLS_BIN)/act

# The local world's build tag: tests, the demo and the benchmarks talk to a plain-http GitHub
# stand-in on a loopback address, which only binaries built with it accept (docs/security.md).
# build, dist and infra-assets never carry it.
LOCALWORLD := -tags localworld

# Run a command with the emulators' endpoints in the environment.
WITH_TESTBED = set -a && . $(ENDPOINTS) && set +a &&

# The CDK app: its own module under infra/; the jsii runtime unpacks into .cache/jsii.
INFRA_ENV = JSII_RUNTIME_PACKAGE_CACHE_ROOT=$(CURDIR)/.cache/jsii JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION=1
HANGAR_CONFIG ?= hangar.example.yaml

CFNVAL := .cache/cfnval/node_modules/@aws/cloudformation-validate/package.json

# GitHub's own descriptions, pinned, for the contract tests (internal/testkit/ghspec): the REST
# API's and the webhooks' OpenAPI descriptions, and the webhook payloads GitHub recorded. make
# test passes their folder in HANGAR_OCTOKIT.
OCTOKIT_PINS := @octokit/openapi@23.0.2 @octokit/openapi-webhooks@12.1.0 @octokit/webhooks-examples@7.6.1
OCTOKIT      := .cache/octokit/node_modules/@octokit

.PHONY: help build dist demo octokit test test-reliability test-short test-host test-infra synth validate-template infra-assets testbed-up testbed-down testbed-status lint hooks bench tidy clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build every binary (CGO_ENABLED=0); the agent and its helper hangar-runas, the refresh bootstrap and the webhook bootstrap for linux amd64 and arm64
	@mkdir -p $(BIN)
	@for c in $(CMDS); do \
	  echo "build $$c"; CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/$$c ./cmd/$$c || exit 1; \
	  case $$c in agent|refresh|webhook) \
	    for a in $(ARCHES); do \
	      out=$(BIN)/linux-$$a/$$c; [ $$c = refresh ] && out=$(BIN)/linux-$$a/bootstrap; [ $$c = webhook ] && out=$(BIN)/linux-$$a/webhook/bootstrap; \
	      echo "build $$out"; GOOS=linux GOARCH=$$a CGO_ENABLED=0 $(GO) build -trimpath -tags lambda.norpc -ldflags '$(LDFLAGS)' -o $$out ./cmd/$$c || exit 1; \
	    done;; \
	  esac; \
	done
	@echo "build hangar-runas"; CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/hangar-runas ./cmd/agent/runas
	@for a in $(ARCHES); do \
	  echo "build $(BIN)/linux-$$a/hangar-runas"; GOOS=linux GOARCH=$$a CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/linux-$$a/hangar-runas ./cmd/agent/runas || exit 1; \
	done
	@[ -n "$(CMDS)" ] || echo "no binaries yet"

dist: ## the action's release assets in dist/: hangar-provision-, hangar-release- and hangar-<os>-<arch> for each of DIST_PLATFORMS, and checksums.txt
	@rm -rf dist && mkdir -p dist
	@for p in $(DIST_PLATFORMS); do os=$${p%/*}; a=$${p#*/}; ext=; [ $$os = windows ] && ext=.exe; \
	  for c in $(DIST_CMDS); do name=hangar-$$c; [ $$c = hangar ] && name=hangar; \
	    echo "build dist/$$name-$$os-$$a$$ext"; \
	    GOOS=$$os GOARCH=$$a CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o dist/$$name-$$os-$$a$$ext ./cmd/$$c || exit 1; \
	  done; done
	cd dist && sha256sum hangar-* > checksums.txt
	@echo "dist/: $$(ls dist | wc -l) files; upload them all to the release (docs/operations.md, Releasing)"

test: testbed-up test-infra validate-template $(ACT) octokit ## start the local emulators if needed, then run every test with -race (the CDK app's too, the example workflows under act, and the contract tests against GitHub's descriptions)
	$(WITH_TESTBED) HANGAR_ACT=$(CURDIR)/$(ACT) HANGAR_OCTOKIT=$(CURDIR)/$(OCTOKIT) HANGAR_TEST_OUTPUT=$(CURDIR)/.cache/test-output $(GO) test $(LOCALWORLD) -race -count=1 -timeout 30m ./...

test-infra: testbed-up ## the CDK app's tests: config validation, assertions on the synthesized template, and its deployment into the emulators (needs node)
	$(WITH_TESTBED) cd infra && $(INFRA_ENV) $(GO) test $(LOCALWORLD) -count=1 ./...

infra-assets: ## build what the stack ships into infra/build: the agent and its helper hangar-runas (linux amd64, arm64), the refresh bootstrap and the webhook bootstrap (arm64)
	@mkdir -p infra/build/refresh infra/build/webhook
	GOOS=linux GOARCH=amd64 CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o infra/build/agent-linux-amd64 ./cmd/agent
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o infra/build/agent-linux-arm64 ./cmd/agent
	GOOS=linux GOARCH=amd64 CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o infra/build/hangar-runas-linux-amd64 ./cmd/agent/runas
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o infra/build/hangar-runas-linux-arm64 ./cmd/agent/runas
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -trimpath -tags lambda.norpc -ldflags '$(LDFLAGS)' -o infra/build/refresh/bootstrap ./cmd/refresh
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -trimpath -tags lambda.norpc -ldflags '$(LDFLAGS)' -o infra/build/webhook/bootstrap ./cmd/webhook

validate-template: synth $(CFNVAL) ## check the synthesized template offline (@aws/cloudformation-validate): no errors
	cd .cache/cfnval && cp ../../infra/scripts/validate.mjs . && node validate.mjs ../../infra/cdk.out/$(shell sed -n 's/^stack: *//p' infra/$(HANGAR_CONFIG) | head -1).template.json

$(CFNVAL):
	@mkdir -p .cache/cfnval
	cd .cache/cfnval && npm install --no-audit --no-fund --prefix . @aws/cloudformation-validate@1.9.0-beta

octokit: ## install GitHub's own descriptions (OCTOKIT_PINS, npm) into .cache/octokit for the contract tests; again only when the pins change
	@[ "$$(cat .cache/octokit/pins 2>/dev/null)" = "$(OCTOKIT_PINS)" ] || { mkdir -p .cache/octokit && \
	  (cd .cache/octokit && npm install --no-audit --no-fund --prefix . $(OCTOKIT_PINS)) && echo "$(OCTOKIT_PINS)" > .cache/octokit/pins; }

synth: infra-assets ## synthesize the stack of HANGAR_CONFIG (default infra/hangar.example.yaml) into infra/cdk.out
	cd infra && $(INFRA_ENV) HANGAR_CONFIG=$(HANGAR_CONFIG) CDK_OUTDIR=cdk.out $(GO) run .

demo: testbed-up infra-assets ## the whole lifecycle locally: the stack deployed into the emulators, provision (cold) → jobs → release → reuse → expiry → warm pool
	$(WITH_TESTBED) $(INFRA_ENV) $(GO) run $(LOCALWORLD) ./internal/cmd/demo

test-short: ## unit tests and the use cases on in-memory fakes: no emulator, no root (the host tests skip)
	$(GO) test $(LOCALWORLD) -race -short ./...

# The packages holding host tests: those that need root to change the machine (users, cgroups,
# system directories; testbed.RequireRoot). make test runs them with everything else.
HOST_PKGS := $(addprefix ./,$(sort $(dir $(shell grep -rl --include='*_test.go' 'testbed.RequireRoot' cmd internal pkg))))

test-host: testbed-up ## as root: the host tests (users, cgroups, system directories), which test-short skips, with the unit tests of their packages
	@[ "$$(id -u)" = 0 ] || { echo "make test-host needs root"; exit 1; }
	$(WITH_TESTBED) HANGAR_HOST_TESTS=1 $(GO) test $(LOCALWORLD) -race -short -count=1 $(HOST_PKGS)

testbed-up: ## install (cached under .cache/) and start moto, DynamoDB Local, the metadata mock and the Price List stand-in; install Chromium for the browser test
	@$(TESTBED) up

testbed-down: ## stop the emulators
	@$(TESTBED) down

testbed-status: ## say which emulators run
	@$(TESTBED) status

lint: $(GOLANGCI) ## gofmt check, go vet and golangci-lint (built once from tools/go.mod into .cache/)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GOLANGCI) run ./...
	cd infra && $(GO) vet ./... && ../$(GOLANGCI) run ./...

hooks: ## use the repository's git hooks: gofmt and go vet on what is staged, and a commit message's form (subject of at most 72 characters, blank line, body)
	git config core.hooksPath scripts/git-hooks

$(ACT): tools/act/go.mod tools/act/go.sum
	@mkdir -p $(TOOLS_BIN)
	@echo "building act from tools/act/go.mod (once; about half a minute)"
	cd tools/act && CGO_ENABLED=0 $(GO) build -o ../../$(ACT) github.com/nektos/act

$(GOLANGCI): tools/go.mod tools/go.sum
	@mkdir -p $(TOOLS_BIN)
	@echo "building golangci-lint from tools/go.mod (once; about a minute)"
	cd tools && CGO_ENABLED=0 $(GO) build -o ../$(GOLANGCI) github.com/golangci/golangci-lint/v2/cmd/golangci-lint

bench: testbed-up ## the scoreboard: measure every target on the emulators with real agents; prints a markdown table and writes bench.json (docs/benchmarks.md)
	$(WITH_TESTBED) $(GO) run $(LOCALWORLD) ./internal/cmd/bench

test-reliability: testbed-up ## the reliability suite in full (races, crashes, faults, partitions, bad input, secrets, soak); make test runs its short form
	$(WITH_TESTBED) HANGAR_RELIABILITY=full $(GO) test $(LOCALWORLD) -race -count=1 -timeout 60m ./internal/reliability/...

tidy: ## go mod tidy
	$(GO) mod tidy

clean: ## remove built binaries (the emulator cache stays; rm -rf .cache to drop it)
	rm -rf $(BIN)
