// Package operator holds the calls of a cell's operators and its
// administrator, made through a client.Client's connection: the cell's
// status and a replica's own view of it, tenants and their quotas, tenant
// tokens, the lists of open sessions and held locks, a planned hand-over
// of mastership, a backup of the cell's state, and changes of the replica
// set (adding, removing and replacing replicas).
//
// Applications that only take locks and read and write files need package
// client alone; lockctl, lockcelld's dev mode, the fault-injection tools
// and the benchmarks use this package besides. Its calls take and return
// the wire contract's types (package api), since they mirror the cell's
// administration RPCs one to one.
//
// An Operator adds no state to its Client: it is safe for concurrent use,
// and as many as wanted may share one Client. Calls that only the cell
// administrator (_cell/admin) may make return an error wrapping
// api.ErrPermissionDenied for anyone else.
package operator
