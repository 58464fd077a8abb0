// Package cell wires one lockcell replica together: its Pebble store (the
// Paxos log and the namespace share one DB under separate key prefixes),
// the run loop around the pure Paxos core, the QUIC endpoint, and — while
// the replica holds the master lease — the master role that serves
// clients.
//
// # The run loop
//
// One goroutine (Replica.run) owns the paxos.Node. It ticks the node from a
// ticker (Config.Tick), steps it with peer messages from the transport,
// hands it client commands, and carries out each Ready in the order
// paxos/doc.go prescribes: messages that depend on no persistence leave
// first, then the hard state and accepted entries are saved in one synced
// Pebble batch, then the remaining messages leave, a snapshot is installed,
// chosen slots are applied to the namespace in order (one Pebble batch per
// slot), proposal outcomes are delivered, and the node advances. A storage
// error stops the replica (Done, Err); it never continues on a guess. Every
// SnapshotEvery applied slots the namespace is snapshotted into the Paxos
// log's store and the log below it is dropped; lagging peers get the
// snapshot and then the tail.
//
// # The master
//
// Only the replica whose paxos.Status reports Master serves client
// requests; the others answer NotMaster with the master's address. The
// master epoch is its ballot; requests naming another epoch get Failover.
// Writes are proposed through Paxos and answered once applied (concurrent
// commands share slots: group commit); reads are served from the applied
// state under the master lease. The master role (master.go) holds what
// lives only in the master's memory: session leases and KeepAlive
// long-polls (package session), the FIFO queues of blocked Acquire calls,
// event subscriptions, and which sessions cache which nodes. A new master
// rebuilds sessions from the applied state and extends their leases
// (Chubby §2.9); clients re-establish handles on their next call, since
// handles are self-describing.
//
// # Concurrency and life cycle
//
// Start opens the store and starts the loop; Close stops it. RPC handlers
// run on the transport's goroutines and reach the loop through a proposal
// channel; namespace reads run on the handlers' goroutines (the namespace
// allows concurrent readers). Replica's methods are safe for concurrent
// use. StartLocal runs a whole cell in one process (tests, `lockcelld dev`).
package cell
