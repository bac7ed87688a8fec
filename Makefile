# Developer and CI targets. CI runs `make test` through .ci/run.
#
#   make test   install the test servers if needed, go vet, then every test with
#               the race detector against real Valkey and PostgreSQL servers
#               (LEASE_REQUIRE_SERVERS=1: a missing server fails, never skips)
#   make bench  the comparison benchmarks of bench/ (PostgreSQL, leasequeue,
#               Valkey), each in ROUNDS interleaved rounds (default 6), with
#               benchstat's tables and the ratios to each baseline, then
#               bench/footprint (a million keys on each backend, once, about
#               ten minutes; FOOTPRINT_ROUNDS and FOOTPRINT_BASE, not ROUNDS
#               and BASE, repeat it or compare it with a revision);
#               `make bench ROUNDS=10 BASE=main` adds a before/after column
#               for that revision, DURABLE=1 runs PostgreSQL durably
#   make bench-micro  the product module's own benchmarks, once each, with
#               allocations
#   make chaos  the fault matrix of internal/testkit/chaos in its long form: the fault
#               rows share DURATION (default 10m; `make chaos DURATION=2m`),
#               against real servers with the race detector; the output goes
#               to internal/testkit/chaos/testdata/out/chaos.log, and a history that
#               fails its check leaves its visualisation beside it
#   make lint   gofmt, go vet and staticcheck with every check (staticcheck.conf)
#
# internal/testkit/chaos, internal/testkit/obscheck, bench and examples/migrate are modules of
# their own (with a replace of this module), so that what only they need
# (toxiproxy, porcupine, peer libraries, goose, golang-migrate, Prometheus'
# PromQL engine) never enters the product's go.mod; test and lint run them
# separately.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
# How bash's `time` reports each step.
export TIMEFORMAT := ... took %1Rs

GO ?= go
GOBIN_DIR := $(or $(shell $(GO) env GOBIN),$(shell $(GO) env GOPATH)/bin)
STATICCHECK := $(GOBIN_DIR)/staticcheck

.PHONY: test bench bench-micro lint deps chaos

DURATION ?= 10m
# Parallel tests mostly wait on servers, TTLs and timers, not on the CPU:
# on 2 cores, four at a time (go test's default is GOMAXPROCS) halves the
# longest packages and still leaves every test its timing headroom.
PARALLEL ?= 4
CHAOS_OUT := internal/testkit/chaos/testdata/out

deps:
	@echo "==> scripts/install-deps.sh servers"; time bash scripts/install-deps.sh servers

test: deps
	@echo "==> smoke: the real servers start (versions below)"; \
		LEASE_REQUIRE_SERVERS=1 $(GO) test -count=1 -v -run '^(TestSharedValkey|TestSharedPostgres)$$' ./internal/testkit/testserver \
		| grep -E '(shared (Valkey|PostgreSQL) |^(ok|FAIL|---))'
	@echo "==> go vet ./..."; time $(GO) vet ./...
	@echo "==> go test -race -count=1 -parallel $(PARALLEL) ./... (LEASE_REQUIRE_SERVERS=1)"; \
		time LEASE_REQUIRE_SERVERS=1 $(GO) test -race -count=1 -parallel $(PARALLEL) ./...
	@echo "==> internal/testkit/obscheck (own module): go vet, go test -race"; \
		cd internal/testkit/obscheck && $(GO) vet ./... && \
		time LEASE_REQUIRE_SERVERS=1 $(GO) test -race -count=1 ./...
	@echo "==> internal/testkit/chaos (own module): go vet, go test -race (the short rows)"; \
		cd internal/testkit/chaos && $(GO) vet ./... && \
		time LEASE_REQUIRE_SERVERS=1 $(GO) test -race -count=1 ./...
	@echo "==> examples/migrate (own module): go vet, go test -race (goose and golang-migrate)"; \
		cd examples/migrate && $(GO) vet ./... && \
		time LEASE_REQUIRE_SERVERS=1 $(GO) test -race -count=1 ./...

bench: deps
	@bash scripts/install-deps.sh bench
	@for area in postgres leasequeue valkey footprint; do \
		echo "==> bench/$$area/run.sh"; sh bench/$$area/run.sh || exit 1; \
	done

bench-micro: deps
	@echo "==> go test -bench"; time $(GO) test -run '^$$' -bench . -benchmem ./...

chaos: deps
	@mkdir -p $(CHAOS_OUT)
	@echo "==> go test ./internal/testkit/chaos (LEASE_CHAOS_DURATION=$(DURATION))"; \
		time LEASE_REQUIRE_SERVERS=1 LEASE_CHAOS_DURATION=$(DURATION) \
		$(GO) -C internal/testkit/chaos test -race -count=1 -timeout 0 -v . > $(CHAOS_OUT)/chaos.log 2>&1 || \
		{ grep -E '^(--- FAIL|FAIL)|chaos-summary|    [a-z_]+_test.go' $(CHAOS_OUT)/chaos.log; exit 1; }
	@grep -E 'chaos-summary|^(ok|PASS)' $(CHAOS_OUT)/chaos.log

lint:
	@bash scripts/install-deps.sh lint
	@echo "==> gofmt -l ."; \
		unformatted=$$(gofmt -l .); \
		if [[ -n $$unformatted ]]; then echo "gofmt -w these files:"; echo "$$unformatted"; exit 1; fi
	@echo "==> go vet ./..."; time $(GO) vet ./...
	@echo "==> staticcheck ./..."; time $(STATICCHECK) ./...
	@echo "==> internal/testkit/chaos, internal/testkit/obscheck, bench, examples/migrate (own modules): go vet, staticcheck"; \
		for m in internal/testkit/chaos internal/testkit/obscheck bench examples/migrate; do (cd $$m && $(GO) vet ./... && $(STATICCHECK) ./...) || exit 1; done
