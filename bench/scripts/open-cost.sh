#!/bin/sh
# open-cost.sh: instructions per session creation, counted by valgrind's
# callgrind (stable under load, unlike wall-clock time), as
# cpu-per-command.sh counts them for locks. Two figures:
#
#   - BenchmarkApplyCreateSession: one replica applying slots of 64
#     CreateSessions (namespace and Pebble's write path, in memory);
#   - TestCreateSessionsShareSlots: a whole five-replica cell on synctest's
#     clock (simulated network, real Pebble) and its client opening
#     sessions with 192 in flight, at N1 and N2 sessions; the difference
#     over N2-N1 is the instructions per open of the five replicas and the
#     client together (about a fifth of it is the client library's).
#
# GOGC=off keeps the collector's timing out of the differences (without
# it the apply figure varied 30k-83k between runs of the same tree);
# GODEBUG=asyncpreemptoff=1: callgrind 3.19 aborts on the Go runtime's
# preemption signals.
#
# Usage: bench/scripts/open-cost.sh [outdir]   (from the module root)
set -eu
out=${1:-$(mktemp -d)}
mkdir -p "$out"
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
go test -c -o "$out/namespace.test" ./namespace
go test -c -o "$out/client.test" ./client

collected() { sed -n 's/^==[0-9]*== Collected : //p' "$1"; }

apply() {
	GOGC=off GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$out/cg.apply.$1" \
		"$out/namespace.test" -test.run='^$' -test.bench='BenchmarkApplyCreateSession$' -test.benchtime="$1x" \
		>"$out/log.apply.$1" 2>&1 || { echo "run failed: see $out/log.apply.$1" >&2; return 1; }
	collected "$out/log.apply.$1"
}
a1=$(apply 50)
a2=$(apply 250)
echo "BenchmarkApplyCreateSession: $(( (a2 - a1) / (200 * 64) )) instructions per CreateSession applied (one replica)"

cell() {
	LOCKCELL_OPEN_SESSIONS=$1 GOGC=off GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$out/cg.open.$1" \
		"$out/client.test" -test.run='^TestCreateSessionsShareSlots$' -test.v \
		>"$out/log.open.$1" 2>&1 || { echo "run failed: see $out/log.open.$1" >&2; return 1; }
	collected "$out/log.open.$1"
}
c1=$(cell 2000)
c2=$(cell 6000)
echo "TestCreateSessionsShareSlots: $(( (c2 - c1) / 4000 )) instructions per session opened (five replicas and the client)"
echo "callgrind outputs in $out (callgrind_annotate FILE for the top items)"
