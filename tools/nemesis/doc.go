// Package nemesis is lockcell's fault-injection suite on real processes.
//
// A run starts a five-replica cell as separate OS processes (`lockcelld
// serve`, built once into a temporary directory) on loopback, a protected
// resource (tools/fencedkv behind the sequencer Validator, served over HTTP
// from the nemesis process), and K worker clients, each a separate process
// (the nemesis binary re-executed in worker mode) so that it can be stopped
// with SIGSTOP. Workers run four workloads together:
//
//   - fenced: acquire a lock, claim the resource with the sequencer, read a
//     counter, write counter+1 with the sequencer, release;
//   - zombie: the same, but between its reads and its writes the worker
//     says it holds the lock and spins; the nemesis stops it (SIGSTOP) for
//     longer than twice the session lease and continues it, and the
//     worker's first look at the lock ends its hold; then it writes anyway,
//     as a zombie holder;
//   - register: get / set / compare-and-set (on the content generation) of a
//     few files, checked for linearizability with porcupine;
//   - ack-set: creates of unique files; every acknowledged create must exist
//     at the end.
//
// While they run, a schedule drawn from a seed injects faults: kill -9 of the
// master, of a random minority and of every replica (then restart), SIGSTOP
// of the master for 0.5× to 5× the master lease, network partitions through
// each replica's /debug/faults (isolate the master, majority/minority,
// one-way), clock-rate skew of one replica inside the drift bound, and slow
// fsync. A sampler polls every replica's status page to see who serves as
// master.
//
// Every holder records its hold on the host's monotonic clock (mutex.go),
// and every holder also makes its read-modify-write on an unfenced register
// beside the fenced resource, to show what fencing prevented.
//
// After the faults stop, the checkers run: no two holds of a lock whose
// context was intact overlapped, generations were granted once and in
// order, and no zombie ended its hold with an intact context (mutual
// exclusion, independent of fencing); the resource never accepted a write
// with an older sequencer than one it had accepted, and two holders'
// writes never interleaved; no lock-protected increment was lost; every
// acknowledged create exists; the register histories are linearizable
// (an undecided check fails); the cell recovered within a bound; every
// replica's state checksum is equal; and no two replicas served as master
// at the same time. Each checker reports how much it judged, and the run
// fails below a floor per checker and per fault kind (floors.go); a fault
// that could not be applied fails it too.
//
// Weakened runs prove that the checkers can fail, each caught by the
// checker it targets: "nofence" switches the resource's sequencer check off
// (fencing), "skew" runs a replica's clock far beyond the drift bound and
// isolates it while it is master (master-overlap), "nofsync" runs the
// replicas without fsync and kills them all (ack-set), and "lockctx" runs
// workers whose lock contexts ignore the lease deadline
// (mutual-exclusion).
//
// Life cycle: Run owns every process it starts (each in its own process
// group, with a parent-death signal on Linux) and kills them all before it
// returns, also on error and on cancellation.
package nemesis
