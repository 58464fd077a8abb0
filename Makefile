# lockcell — build, test and run targets. See README.md.
GO        ?= go
# Packages of the main module (bench/peers is a separate module).
PKGS      ?= ./...
FUZZTIME  ?= 30s
SIMSEEDS  ?= 20000
CELLSIMSEEDS ?= 100
DURATION  ?= 2m
SEED      ?= 0
BENCH_DURATION ?= 3s
PEERS_DURATION ?= 10s
PEERS_SESSIONS ?= 10000
PEERS_REPLICAS ?= 5

.PHONY: all test test-race test-time lint sim sim-cell fuzz bench bench-cpu bench-peers nemesis run run-procs build clean

all: build

build:
	$(GO) build -o bin/ ./cmd/...

## test: the whole suite (under 10 minutes on 2 cores), with invariant checks on.
## The packages whose tests take longest start first (TEST_FIRST; go test
## keeps each package once), so that the last one does not run alone
## while the other core idles; make test-time measures them.
TEST_FIRST ?= ./tools/nemesis ./client ./cmd/lockcelld ./cell/celltest ./cmd/lockctl ./bench ./cell
test: lint
	$(GO) test -tags invariants -count=1 -timeout 9m $(if $(filter ./...,$(PKGS)),$(TEST_FIRST)) $(PKGS)

## test-race: the suite under the race detector (slower; not part of make test).
test-race:
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

## test-time: where make test's time goes: every package's tests run one
## package at a time, with wall and CPU time (user+sys, child processes
## included) per package and per test, and the top TOP tests by each
## (scripts/testtime; logs kept in TESTTIME_OUT, default a temp dir).
TOP ?= 20
TESTTIME_OUT ?=
test-time:
	$(GO) run scripts/testtime/main.go -top $(TOP) $(if $(TESTTIME_OUT),-out $(TESTTIME_OUT)) $(PKGS)

## lint: gofmt and go vet.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags invariants $(PKGS)

## sim: a long batch of Paxos simulator seeds.
sim:
	$(GO) test -tags invariants -count=1 -timeout 120m ./paxos -run TestSimulation -sim.seeds=$(SIMSEEDS)

## sim-cell: a long batch of whole-cell simulator seeds (cell/celltest; make
## test runs three).
sim-cell:
	$(GO) test -tags invariants -count=1 -timeout 120m ./cell/celltest -run TestCellSimulation -sim.seeds=$(CELLSIMSEEDS)

## fuzz: every fuzz target for FUZZTIME each.
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) ./scripts/fuzz.sh

## bench: the Go benchmarks, briefly, then the lockcell-only harness suite
## (bench/) briefly against a cell of lockcelld processes. It says what it
## is doing as it goes: the packages one by one, then the harness.
# BENCH_PKGS lists the directories of the packages that have benchmarks.
BENCH_PKGS = $(GO) list -f '{{.Dir}}' $(PKGS) | while read d; do grep -qs '^func Benchmark' $$d/*_test.go && echo $$d; done
bench:
	@echo "== make bench 1/3: every benchmark once, to check it runs (output kept only on failure)"
	@for p in $$($(BENCH_PKGS)); do \
		printf '   %s ... ' "$$p"; \
		out=$$($(GO) test -run '^$$' -bench . -benchtime 1x -count 1 $$p 2>&1) || { echo FAIL; echo "$$out"; exit 1; }; \
		echo ok; \
	done
	@echo "== make bench 2/3: the Go benchmarks, package by package"
	@for p in $$($(BENCH_PKGS)); do \
		echo "-- $$p"; \
		$(GO) test -run '^$$' -bench . -benchmem -count 1 $$p | grep -Ev '^(PASS|ok |goos:|goarch:|pkg:|cpu:)' || true; \
	done
	@echo "== make bench 3/3: the lockcell harness against a cell of lockcelld processes (BENCH_DURATION=$(BENCH_DURATION) per point)"
	$(GO) build -o bin/ ./cmd/... ./bench/cmd/...
	./bin/lockcell-bench --clients 1,64 --duration $(BENCH_DURATION) --sessions 1000 \
		--json bin/bench.jsonl --svg bin/bench.svg --max-time 10m

## bench-cpu: instructions per operation (callgrind; stable under load) of
## the transport's RPC, of applying lock commands, and of a contended lock's
## hand-over in one Paxos round and in two (bench/RESULTS.md, "CPU per
## command"). Needs valgrind.
bench-cpu:
	./bench/scripts/cpu-per-command.sh

## bench-peers: lockcell, etcd and ZooKeeper side by side (installs etcd and
## ZooKeeper from Debian's packages; starts and stops five-node clusters;
## PEERS_REPLICAS=3 for three-member ones).
bench-peers:
	./bench/scripts/install-peers.sh
	$(GO) build -o bin/ ./cmd/... ./bench/cmd/...
	cd bench/peers && $(GO) build -o ../../bin/ ./cmd/bench-peers
	./bin/bench-peers --clients 1,64 --duration $(PEERS_DURATION) --sessions $(PEERS_SESSIONS) --replicas $(PEERS_REPLICAS) \
		--json bin/bench-peers.jsonl --svg bin/bench-peers.svg --max-time 60m

## run: build and start a local five-replica cell (data under ./data/dev).
run:
	$(GO) build -o bin/ ./cmd/...
	./bin/lockcelld dev --dir data/dev

## run-procs: the same cell as five lockcelld processes (data under
## ./data/dev-procs), so that one can be killed to watch a fail-over.
run-procs:
	$(GO) build -o bin/ ./cmd/...
	./bin/lockcelld dev --procs --dir data/dev-procs

## nemesis: the fault-injection suite on real processes (DURATION, SEED; SEED=0 picks one):
## per checker what it judged, its floor and its violations; per fault kind how many were
## applied; each zombie's outcome (docs/nemesis.md).
nemesis:
	$(GO) run ./tools/nemesis/cmd/nemesis -duration $(DURATION) -seed $(SEED)

clean:
	rm -rf bin
