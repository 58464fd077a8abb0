package cell

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/paxos"
	"github.com/lockcell/lockcell/session"
)

func apiErr(code api.Code, msg string) *api.Error { return &api.Error{Code: code, Msg: msg} }

func errUnavailable(msg string) *api.Error { return apiErr(api.Unavailable, msg) }

func errInvalid(msg string) *api.Error { return apiErr(api.InvalidArgument, msg) }

func ctxError(ctx context.Context) *api.Error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return apiErr(api.DeadlineExceeded, "the request's deadline passed")
	}
	return apiErr(api.Canceled, "the request was canceled")
}

// proposalBackoff is the RetryAfter of a command the Paxos core refused
// because too many already wait for a slot: about the time a few slots
// take to be chosen, by when the backlog has moved.
const proposalBackoff = 20 * time.Millisecond

// proposeError maps a Paxos refusal to the wire: every one of them means
// the command was definitely not chosen, so the client may retry it.
//
// The core's back-pressure (paxos.ErrBusy) is a shed, not an outage: it is
// ResourceExhausted with a RetryAfter, as a full tenant queue is, so that a
// client waits and asks again (a shed CreateSession is retried by the
// client library) rather than treat the replica as failing (Unavailable
// makes a client drop its connection, and with it every session's
// KeepAlives on it).
// errCoreBusy sheds a command the Paxos core refused for want of room
// (paxos.ErrBusy); it is one value, so that a handler can tell it apart.
var errCoreBusy = api.RetryAfterError("the master's Paxos core has too many commands waiting for a slot; it is saturated", proposalBackoff)

func (r *Replica) proposeError(err error) *api.Error {
	switch {
	case errors.Is(err, paxos.ErrNotLeader), errors.Is(err, paxos.ErrPreempted):
		return r.notMaster()
	case errors.Is(err, paxos.ErrBusy):
		return errCoreBusy
	case errors.Is(err, paxos.ErrOutcomeUnknown):
		return apiErr(api.Unavailable, "the command's outcome is unknown (its slot was covered by a snapshot); read before retrying")
	}
	return apiErr(api.Internal, err.Error())
}

// notMaster is the NotMaster error naming the master this replica knows
// of, or else the successor it handed mastership to (a redirect the
// client follows at once).
//
// A replica removed from the cell says so: it serves no clients again.
func (r *Replica) notMaster() *api.Error {
	e := apiErr(api.NotMaster, "this replica is not the master")
	if st := r.status.Load(); st != nil && st.Leader != 0 && uint64(st.Leader) != r.cfg.ID {
		e.Master = r.members.addrOf(uint64(st.Leader))
	} else if s := r.successor.Load(); s != 0 && s != r.cfg.ID {
		e.Master = r.members.addrOf(s)
		e.Msg = "this replica handed mastership over"
	}
	if d := r.members.view(); d != nil && d.retired(r.cfg.ID) {
		e.Msg = fmt.Sprintf("replica %d was removed from the cell (membership of slot %d: %s); it serves no clients", r.cfg.ID, d.Members.Index, d.Members.String())
	}
	return e
}

// sessionError maps the session manager's errors to the wire.
func (r *Replica) sessionError(err error) *api.Error {
	switch {
	case errors.Is(err, session.ErrExpired), errors.Is(err, session.ErrUnknownSession):
		return apiErr(api.SessionExpired, "the session has ended")
	case errors.Is(err, session.ErrNotServing):
		return r.notMaster()
	case errors.Is(err, session.ErrBadAck):
		return errInvalid(err.Error())
	case errors.Is(err, context.Canceled):
		return apiErr(api.Canceled, "the request was canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return apiErr(api.DeadlineExceeded, "the request's deadline passed")
	}
	return apiErr(api.Internal, err.Error())
}

// toAPIError turns any error into the wire error.
func toAPIError(err error) *api.Error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae
	}
	switch {
	case errors.Is(err, context.Canceled):
		return apiErr(api.Canceled, "the request was canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return apiErr(api.DeadlineExceeded, "the request's deadline passed")
	}
	return apiErr(api.Internal, err.Error())
}
