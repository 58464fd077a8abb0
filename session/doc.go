// Package session keeps master-side session liveness for one master term:
// session leases in memory, KeepAlive long-polls, per-session event queues,
// and the fail-over lease extension of Chubby §2.9.
//
// # Role
//
// A session is created and closed through Paxos (the namespace records it),
// but its lease lives only in the master's memory and KeepAlives are never
// logged. The Manager holds those leases. It decides when a lease has run out
// without renewal and hands that decision to the cell as a value (a Decision
// on Decisions()); the cell proposes the ExpireSession command and, once it
// is applied, calls Remove. The Manager never removes a session on its own,
// and it imports neither paxos nor namespace.
//
// # Life cycle
//
// The cell creates a Manager with New when its replica becomes master and
// calls Start with the sessions present in the applied state. On a fail-over
// Start gives every session a lease of Config.MaxLease measured from now (the
// longest the old master may have granted) and queues an
// api.EventMasterFailover for each. After Start the cell calls Add for each
// applied CreateSession, Remove for each applied CloseSession or
// ExpireSession, Publish for events, and serves KeepAlive RPCs with
// KeepAlive. When the replica loses mastership the cell calls Stop: parked
// KeepAlives return ErrNotServing at once, the expiry goroutine ends,
// Decisions is closed, and the Manager is finished; the next term gets a new
// one.
//
// # Time
//
// Leases are instants of internal/monotime on the master's monotonic clock.
// Replies carry the lease as a relative duration, because clocks differ
// between machines: the client measures it from the moment it sent the
// request, which makes the client's view end no later than the master's.
// Expired and NextDeadline are pure functions of the state and the `now`
// they are given; only the expiry goroutine and parked KeepAlives wait, on
// the injected Config.Clock.
//
// # Concurrency
//
// A Manager is safe for concurrent use. One mutex guards all state; no call
// holds it while it blocks. Start launches one goroutine (the expiry loop);
// Stop waits for it and for every KeepAlive call in progress to return.
package session
