package client

import (
	"errors"
	"fmt"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/transport"
)

// Errors returned by this package. Errors from the cell are *api.Error
// values (wrapped); compare both kinds with errors.Is.
var (
	// ErrInvalidConfig: a Config that cannot work (no addresses, no CA, a
	// grace period shorter than zero, ...).
	ErrInvalidConfig = errors.New("client: invalid config")
	// ErrClosed: the Client or Session was closed by its owner.
	ErrClosed = errors.New("client: closed")
	// ErrSessionExpired: the session ended — the master expired it, or the
	// grace period ran out without reaching a master. It never comes back.
	ErrSessionExpired = errors.New("client: session expired")
	// ErrJeopardy is the cause of a lock's context when the session's local
	// lease ran out: the lock may be lost, so work under it must stop.
	ErrJeopardy = errors.New("client: session in jeopardy")
	// ErrReleased is the cause of a lock's context after Release.
	ErrReleased = errors.New("client: lock released")
	// ErrHandleInvalid: the handle's node was deleted (or re-created); any
	// lock held through it is gone.
	ErrHandleInvalid = errors.New("client: handle invalid")
	// ErrNotHeld: Release of a lock this session does not hold (a
	// stale release frees nothing).
	ErrNotHeld = errors.New("client: lock not held")
	// ErrLocked: TryAcquire or TryLock found the lock held in a conflicting
	// mode (or in lock-delay). The error also matches api.ErrLocked or
	// api.ErrLockDelay.
	ErrLocked = errors.New("client: locked")
	// ErrOutcomeUnknown: a call that is not safe to repeat lost its reply
	// (the connection failed after sending it); it may or may not have taken
	// effect. Read before retrying.
	ErrOutcomeUnknown = errors.New("client: outcome unknown")
	// ErrTooManyConns: a replica closed the connection because the
	// client's source address holds as many connections there as it allows
	// (the replica setting max_conns_per_ip, named in the message). Dial
	// returns it at once rather than wait. It is transport.ErrTooManyConns.
	ErrTooManyConns = transport.ErrTooManyConns
	// ErrStreamLimit: a call's context ended while it waited for a free
	// stream on the connection, which had as many calls in flight as the
	// replica allows (max_streams_per_conn). It is transport.ErrStreamLimit;
	// the context's error is wrapped too.
	ErrStreamLimit = transport.ErrStreamLimit
	// ErrNoLeader: an election has no current leader.
	ErrNoLeader = errors.New("client: no leader")
	// ErrNotLeader: Resign by a candidate that is not the leader.
	ErrNotLeader = errors.New("client: not the leader")

	// Dial's errors when it finds no master within Config.DialPatience
	// and the replicas' answers say why (see probe.go).

	// ErrCertificate: a TLS handshake failed over a certificate: the
	// replicas' certificates do not verify with the configured CA, or the
	// replicas refused the client certificate.
	ErrCertificate = errors.New("client: certificate refused")
	// ErrUnauthenticated: the cell refused the client's credentials (a
	// token that is unknown or revoked, or no credentials at all). The
	// error also matches api.ErrUnauthenticated.
	ErrUnauthenticated = errors.New("client: credentials refused")
	// ErrNoMaster: replicas answered, but none is master and none knows
	// one: the cell has no quorum (too few replicas up or connected). The
	// message names the replicas that answered and those that did not.
	ErrNoMaster = errors.New("client: no master")
	// ErrUnreachable: no replica answered at all (the cell is down, the
	// addresses are wrong, or the network drops the traffic).
	ErrUnreachable = errors.New("client: no replica reachable")
)

// retryable reports whether err from one attempt may be retried, and
// whether the attempt definitely had no effect (so that even a call that is
// not idempotent may be retried).
func classify(err error) (retry, noEffect bool) {
	var ae *api.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case api.NotMaster, api.Failover:
			// Refused before anything was done.
			return true, true
		case api.Unavailable:
			// "No quorum" or "outcome unknown": safe only to repeat
			// idempotent calls.
			return true, false
		}
		return false, false
	}
	if errors.Is(err, transport.ErrEncode) || errors.Is(err, transport.ErrInvalidConfig) {
		return false, false
	}
	// A transport failure: connection lost, stream reset, handshake failed.
	return true, false
}

// namesMaster reports whether err is a NotMaster refusal that names the
// master (or the successor of a hand-over): the client may go there at once.
func namesMaster(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Code == api.NotMaster && ae.Master != ""
}

// outcomeUnknown wraps err for a non-idempotent call that lost its reply.
func outcomeUnknown(m api.Method, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrOutcomeUnknown, m, err)
}

// lockedError is ErrLocked with the cell's reason. It reads as the cell's
// error alone ("lockcell: locked: ..." rather than "client: locked:
// lockcell: locked: ...") and matches both ErrLocked and the cell's error.
type lockedError struct{ cell error }

func (e *lockedError) Error() string        { return e.cell.Error() }
func (e *lockedError) Unwrap() error        { return e.cell }
func (e *lockedError) Is(target error) bool { return target == ErrLocked }
