#!/bin/sh
# cpu-per-command.sh: instructions per operation of the Go benchmarks that
# isolate the write path's CPU, counted by valgrind's callgrind (stable
# under load, unlike wall-clock time). Each benchmark runs twice, at N1 and
# N2 operations; (I(N2) - I(N1)) / (N2 - N1) cancels the set-up (binary
# start, certificates, stores) and leaves the instructions per operation,
# plus whatever the process's timers (QUIC, GC, Pebble) ran meanwhile: that
# part grows with wall time, so compare runs on an equally loaded machine
# and repeat a run to see the spread (about ±2% here).
#
# GODEBUG=asyncpreemptoff=1: callgrind 3.19 aborts on the Go runtime's
# preemption signals.
#
# Usage: bench/scripts/cpu-per-command.sh [outdir]   (from the module root)
set -eu
out=${1:-$(mktemp -d)}
mkdir -p "$out"
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
go test -c -o "$out/transport.test" ./transport
go test -c -o "$out/namespace.test" ./namespace
go test -c -o "$out/cell.test" ./cell
go test -c -o "$out/celltest.test" ./cell/celltest

# count BIN BENCH N: total instructions of one run.
count() {
	GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$out/cg.$2.$3" \
		"$out/$1" -test.run='^$' -test.bench="$2" -test.benchtime="$3x" -test.benchmem \
		>"$out/log.$2.$3" 2>&1 || { echo "run failed: see $out/log.$2.$3" >&2; return 1; }
	grep -E '^Benchmark' "$out/log.$2.$3" >&2
	sed -n 's/^==[0-9]*== Collected : //p' "$out/log.$2.$3"
}

# perop BIN BENCH N1 N2 UNIT
perop() {
	i1=$(count "$1" "$2" "$3")
	i2=$(count "$1" "$2" "$4")
	echo "$2: $(( (i2 - i1) / ($4 - $3) )) instructions per op ($5)"
}

perop transport.test 'BenchmarkRPC$' 500 2000 "one RPC, both ends"
perop namespace.test 'BenchmarkApplyAcquireRelease$' 20 100 "200 commands applied on one replica"
# A contended lock's hand-over as one replica applies it: before, in two
# slots (the Release, then the waiter's Acquire); now, one slot (the
# Release carries the waiter's grant).
perop namespace.test 'BenchmarkApplyHandOver/two-slots$' 200 1000 "one hand-over in two slots, one replica"
perop namespace.test 'BenchmarkApplyHandOver/one-slot$' 200 1000 "one hand-over in one slot, one replica"
# The whole cell (five replicas, QUIC, fsync) under callgrind is 50-100x
# slower than native: with the default 1 s master lease no master is elected
# within the benchmark's minute. Its CPU per pair is BenchmarkAcquireRelease's
# cpu-ms/op (getrusage), on a quiet machine.
#
# A cell on synctest's clock does not care: TestHandOverCost runs three
# replicas (simulated network, real Pebble) passing one lock between three
# sessions, -cell.handovers times. GOGC=off keeps the collector's timing
# out of the difference.
cellcount() {
	GOGC=off GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$out/cg.cell.$1.$2" \
		"$out/cell.test" -test.run='^TestHandOverCost$' -test.v -cell.handovers="$2" $3 \
		>"$out/log.cell.$1.$2" 2>&1 || { echo "run failed: see $out/log.cell.$1.$2" >&2; return 1; }
	sed -n 's/^==[0-9]*== Collected : //p' "$out/log.cell.$1.$2"
}
for mode in one-round two-rounds; do
	flag=""
	[ "$mode" = two-rounds ] && flag=-cell.two-rounds
	i1=$(cellcount "$mode" 20 "$flag")
	i2=$(cellcount "$mode" 60 "$flag")
	echo "TestHandOverCost ($mode): $(( (i2 - i1) / 40 )) instructions per hand-over (three replicas and the clients)"
done
# One client locking and unlocking its own lock on an idle five-replica
# cell (simulated network and disk, real Pebble, the client library):
# TestLightLoadCycle at two numbers of cycles.
lightcount() {
	GOGC=off GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$out/cg.light.$1" \
		"$out/celltest.test" -test.run='^TestLightLoadCycle$' -test.v -celltest.cycles="$1" \
		>"$out/log.light.$1" 2>&1 || { echo "run failed: see $out/log.light.$1" >&2; return 1; }
	sed -n 's/^==[0-9]*== Collected : //p' "$out/log.light.$1"
}
i1=$(lightcount 40)
i2=$(lightcount 160)
echo "TestLightLoadCycle: $(( (i2 - i1) / 120 )) instructions per acquire+release (five replicas and the client)"
echo "callgrind outputs in $out (callgrind_annotate FILE for the top items)"
