// Package proccell runs a cell of real `lockcelld serve` processes on
// loopback for tests, the fault-injection suite (tools/nemesis) and the
// benchmark harness (bench): the one place that builds or locates the
// binary, writes the cell with `lockcelld init`, edits each replica's
// config (HTTP listener, fault injection and the test-only knobs: clock
// scale, fsync delay, election timeout, unsafe_no_fsync, log level),
// picks free ports, and starts, stops, kills, pauses, continues and
// restarts replicas, each as a process group of its own. It also
// prepares new replicas at new addresses (JoinReplica, through `lockcelld
// init --join`) and retires replicas for good (Retire: stopped, data
// removed, id never issued again), so tests can replace replicas.
//
// A Cell also reads each replica's /status page, finds the master, sets
// transport faults through /debug/faults, issues client certificates from
// the cell CA and returns client configs.
//
// Life cycle: Start (or Init, then StartReplica for each replica) and,
// at the end, StopAll or KillAll. A Cell's methods are safe for concurrent
// use. Waits take a context; none measures the machine's speed.
//
// Errors: ErrInvalidConfig for a Config that cannot work, ErrNotRunning for
// an action on a replica whose process is not running, ErrNoMaster when no
// replica serves as master; others wrap the failing step's error.
package proccell
