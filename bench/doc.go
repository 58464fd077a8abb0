// Package bench is lockcell's benchmark harness: the same lock workloads run
// against lockcell, etcd and ZooKeeper through one Driver interface, with
// the statistics, progress line, summary table, JSON lines and SVG plot that
// report them.
//
// The workloads (see Workload):
//
//   - uncontended: C clients, each acquiring and releasing its own lock;
//   - contended: C clients on one lock, counting hand-overs, with a
//     FencedCounter checking that no two holders overlapped and that fencing
//     tokens only grew;
//   - readheavy and readheavy-cache: reads of a set of small files with a
//     small write rate, with the client cache off and on;
//   - sessions: S sessions opened and held; server CPU per session-second
//     from /proc of the server processes, their memory, lost sessions;
//   - failover-kill and failover-stepdown: clients loop while the master is
//     killed (SIGKILL) or asked to hand over (SIGTERM); time to the next
//     successful acquire, the longest gap, sessions lost;
//   - failover-pause: the master is stopped (SIGSTOP) for twice lockcell's
//     master lease, then continued (SIGCONT);
//   - failover-partition: a minority holding the master (of five members,
//     two; of three, the master alone) is cut off from the majority for the
//     middle third of the run
//     (lockcell through its replicas' /debug/faults; n/a for systems the
//     harness cannot partition on loopback);
//   - failover-rolling: every member is restarted in turn (SIGTERM, start,
//     wait until healthy), the master last after a hand-over (lockcell's
//     StepDown RPC); the outage of each restart and the master changes
//     seen by polling the members (lockcell: their /status);
//
// Every system runs a cluster of five members, or of 3 or 7 with
// --replicas (Config.Replicas); a result records the size, and the table
// and the plot label other sizes "system/N", so that runs at 3 and 5
// replicas compare side by side.
//
// Every fail-over reports each client's outage — the longest gap between
// its successful lock cycles that overlaps the disruption — as p50, p99
// and max over the clients, with the errors and the sessions lost.
//   - noisy: one tenant floods while another runs a paced workload; the
//     quiet tenant's latency alone and under the flood.
//   - sessions-failover (opt-in: run only when --workloads names it): S
//     sessions opened and held, then the master killed (or, with
//     --sessions-failover=stepdown, asked to hand over); the time
//     until every session is safe with the new master, the most in
//     jeopardy at once, and the sessions lost.
//
// The lockcell driver (NewLockcellDriver) runs against a cell of real
// processes started the way an operator would (`lockcelld init`, then one
// `lockcelld serve` per replica; see ProcCell), or against an in-process
// cell (cell.StartLocal) for the smoke test. The etcd and ZooKeeper drivers
// live in the separate module bench/peers so that the main module does not
// depend on their client libraries; its binary calls Main with them.
//
// Concurrency: a Driver and the Clients it returns are used by many
// goroutines at once (one per client); a Histogram is not safe for
// concurrent use (each worker keeps its own and they are merged).
package bench
