# Developer and CI targets. CI runs `make test` through .ci/run.
#
#   make test   install the test servers if needed, go vet, then every test with
#               the race detector against real Valkey and PostgreSQL servers
#               (LEASE_REQUIRE_SERVERS=1: a missing server fails, never skips);
#               the chaos module's short rows run beside the other tests, and
#               their output follows them (also in
#               internal/testkit/chaos/testdata/out/make-test.log)
#   make bench  the comparison benchmarks of bench/ (PostgreSQL, leasequeue,
#               Valkey, semaphores and sets), each in ROUNDS interleaved
#               rounds (default 6), with benchstat's tables and the ratios
#               to each baseline, then
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
	@# The chaos module's short rows run beside the product module's tests:
	@# both mostly wait on servers and timers, and one after the other they
	@# would not fit in ten minutes on 2 cores. Its output is printed when
	@# it ends, and its failure fails the target.
	@mkdir -p $(CHAOS_OUT); chaos_log=$(CHAOS_OUT)/make-test.log; \
		( cd internal/testkit/chaos && $(GO) vet ./... && \
		  time LEASE_REQUIRE_SERVERS=1 $(GO) test -race -count=1 ./... ) > $$chaos_log 2>&1 & chaos=$$!; \
		status=0; \
		echo "==> go test -race -count=1 -parallel $(PARALLEL) ./... (LEASE_REQUIRE_SERVERS=1)"; \
		time LEASE_REQUIRE_SERVERS=1 $(GO) test -race -count=1 -parallel $(PARALLEL) ./... || status=1; \
		echo "==> internal/testkit/obscheck (own module): go vet, go test -race"; \
		( cd internal/testkit/obscheck && $(GO) vet ./... && \
		  time LEASE_REQUIRE_SERVERS=1 $(GO) test -race -count=1 ./... ) || status=1; \
		echo "==> examples/migrate (own module): go vet, go test -race (goose and golang-migrate)"; \
		( cd examples/migrate && $(GO) vet ./... && \
		  time LEASE_REQUIRE_SERVERS=1 $(GO) test -race -count=1 ./... ) || status=1; \
		chaos_status=0; wait $$chaos || chaos_status=$$?; \
		echo "==> internal/testkit/chaos (own module, run beside the above): go vet, go test -race (the short rows)"; \
		cat $$chaos_log; \
		if [ $$chaos_status -ne 0 ]; then status=1; fi; \
		exit $$status

bench: deps
	@bash scripts/install-deps.sh bench
	@for area in postgres leasequeue valkey groups handoff footprint; do \
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
