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
//   - zombie: the same, but the worker asks to be paused (SIGSTOP) between
//     its read and its write for longer than the session lease, so that it
//     writes as a zombie holder;
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
// After the faults stop, the checkers run: the resource never accepted a
// write with an older sequencer than one it had accepted, and two holders'
// writes never interleaved; no lock-protected increment was lost; every
// acknowledged create exists; the register histories are linearizable; the
// cell recovered within a bound; every replica's state checksum is equal;
// and no two replicas served as master at the same time.
//
// Weakened runs prove that the checkers can fail: Weaken "nofence" switches
// the resource's sequencer check off (lost updates under zombie pauses must
// be detected), and Weaken "skew" runs one replica's clock beyond the drift
// bound and isolates it while it is master (overlapping masters must be
// detected).
//
// Life cycle: Run owns every process it starts (each in its own process
// group, with a parent-death signal on Linux) and kills them all before it
// returns, also on error and on cancellation.
package nemesis
