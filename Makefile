# Developer and CI targets. CI runs `make test` through .ci/run.
#
#   make test   install the test servers if needed, go vet, then every test with
#               the race detector against real Valkey and PostgreSQL servers
#               (LEASE_REQUIRE_SERVERS=1: a missing server fails, never skips)
#   make bench  the benchmarks, once each, with allocations
#   make lint   gofmt, go vet and staticcheck with every check (staticcheck.conf)

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
# How bash's `time` reports each step.
export TIMEFORMAT := ... took %1Rs

GO ?= go
GOBIN_DIR := $(or $(shell $(GO) env GOBIN),$(shell $(GO) env GOPATH)/bin)
STATICCHECK := $(GOBIN_DIR)/staticcheck

.PHONY: test bench lint deps

deps:
	@echo "==> scripts/install-deps.sh servers"; time bash scripts/install-deps.sh servers

test: deps
	@echo "==> go vet ./..."; time $(GO) vet ./...
	@echo "==> go test -race -count=1 ./... (LEASE_REQUIRE_SERVERS=1)"; \
		time LEASE_REQUIRE_SERVERS=1 $(GO) test -race -count=1 ./...

bench: deps
	@echo "==> go test -bench"; time $(GO) test -run '^$$' -bench . -benchmem ./...

lint:
	@bash scripts/install-deps.sh lint
	@echo "==> gofmt -l ."; \
		unformatted=$$(gofmt -l .); \
		if [[ -n $$unformatted ]]; then echo "gofmt -w these files:"; echo "$$unformatted"; exit 1; fi
	@echo "==> go vet ./..."; time $(GO) vet ./...
	@echo "==> staticcheck ./..."; time $(STATICCHECK) ./...
