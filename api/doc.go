// Package api is the wire contract between lockcell clients and the cell:
// the RPC methods and their request and response types (rpc.go), the
// per-method table that the cell's dispatch and the client's retries both
// read — admission class, master only, idempotency, long poll
// (methods.go) — the shared value types such as node metadata, lock modes,
// ACL names, tenants and sessions (types.go), the events a cell delivers
// (event.go), and the error codes every refusal carries (errors.go).
//
// The types are msgpack-tagged plain values with no logic beyond naming and
// validation of their own fields, and the method table's lookups; both the
// client library and the cell import this package, and nothing in it
// imports another package of ours. Method numbers and error codes are
// stable: a number never changes meaning and new ones are only appended, so
// clients and replicas of different versions understand each other.
package api
