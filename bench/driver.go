package bench

import (
	"context"
	"errors"
	"syscall"
)

// Errors of the harness.
var (
	// ErrUnsupported: the driver or its cluster cannot do what a workload
	// needs (an in-process cell has no server processes to measure; a
	// system without a client cache cannot run readheavy-cache). The
	// workload is skipped and says why.
	ErrUnsupported = errors.New("bench: unsupported by this driver")
	// ErrInvalidConfig: flags or a Config that cannot work.
	ErrInvalidConfig = errors.New("bench: invalid config")
	// ErrViolation: a workload saw a safety violation (two holders of one
	// exclusive lock at once, or a fencing token that went backwards).
	ErrViolation = errors.New("bench: safety violation")
)

// Driver connects the harness to one system. Its methods are safe for
// concurrent use.
type Driver interface {
	// Name is the system's name in tables and plots ("lockcell", "etcd",
	// "zookeeper").
	Name() string
	// Connect opens one client — a connection and one session — for
	// tenant. Systems without tenants use the tenant as a key prefix.
	Connect(ctx context.Context, opts ClientOptions) (Client, error)
	// OpenSessions opens n sessions as cheaply as the system allows (many
	// per connection where it can) and holds them until Close; progress is
	// called now and then with the number opened so far.
	OpenSessions(ctx context.Context, tenant string, n int, progress func(int)) (SessionSet, error)
	// Cluster returns the servers' side, or nil if the driver has none it
	// can control.
	Cluster() Cluster
	// Close closes the driver (not the cluster's processes: the Cluster's
	// owner stops them).
	Close() error
}

// ClientOptions configures one client.
type ClientOptions struct {
	// Tenant the client works in; workloads use "bench" unless they need
	// two tenants (noisy neighbour: "quiet" and "noisy").
	Tenant string
	// Cache turns on the client cache of file contents where the system
	// has one (ErrUnsupported otherwise).
	Cache bool
	// ID numbers the client within its workload (for principal names).
	ID int
}

// Client is one client with one session. Its methods may be called from
// one goroutine at a time per Mutex, and concurrently for different ones.
type Client interface {
	// Mutex returns the exclusive lock named name (created if missing).
	Mutex(name string) Mutex
	// Read returns the contents of the file name.
	Read(ctx context.Context, name string) ([]byte, error)
	// Write sets the contents of the file name (created if missing).
	Write(ctx context.Context, name string, data []byte) error
	// Lost reports whether the client's session ended without Close (it
	// expired; its locks are gone).
	Lost() bool
	// Close ends the session and the connection.
	Close(ctx context.Context) error
}

// Mutex is an exclusive lock.
type Mutex interface {
	// Lock waits until the lock is held and returns its fencing token: a
	// number that grows with every grant of this lock (lockcell's lock
	// generation, etcd's creation revision of the holder's key), or 0 when
	// the system's recipe exposes none.
	Lock(ctx context.Context) (token uint64, err error)
	// Unlock releases it.
	Unlock(ctx context.Context) error
}

// SessionSet is a set of sessions held open.
type SessionSet interface {
	// Lost returns how many sessions ended without Close.
	Lost() int
	// Close closes every session.
	Close(ctx context.Context) error
}

// SessionTerms is a SessionSet that knows which master term each of its
// sessions last heard from (lockcell: the epoch of its last KeepAlive
// reply), so that sessions-failover can tell when every session has been
// taken over by a new master.
type SessionTerms interface {
	SessionSet
	// Behind returns the newest term any session that has not ended heard
	// from, how many such sessions are not safe (in jeopardy), and how
	// many are not safe or last heard from a term at or before since.
	Behind(since uint64) (newest uint64, unsafe, behind int)
}

// Cluster is the server side of a system: its processes, for CPU and
// memory, and its leader, for fail-over.
type Cluster interface {
	// PIDs returns the running server processes (nil if the servers are
	// not processes of their own; the sessions workload then says so).
	PIDs() []int
	// Leader returns the member (1-based) that leads now.
	Leader(ctx context.Context) (int, error)
	// Signal sends sig to member's process: SIGKILL crashes it, SIGTERM
	// asks it to stop, handing leadership over first where the system
	// does (lockcell, etcd).
	Signal(ctx context.Context, member int, sig syscall.Signal) error
	// Restart starts a member that was stopped, on its data, and returns
	// once it runs.
	Restart(ctx context.Context, member int) error
	// Healthy returns nil once every member runs and a leader serves.
	Healthy(ctx context.Context) error
}
