package session

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/lockcell/lockcell/internal/monotime"
)

// Chubby's published numbers (Chubby §2.8 and §3).
const (
	// DefaultLease is the session lease a grant extends by: "The default
	// extension is 12s".
	DefaultLease = 12 * time.Second
	// ChubbyLoadedLease is the lease Chubby's overloaded masters moved to:
	// "Increase lease times from 12s up to around 60s". It is a reference
	// value for Config.MaxLease, not a default.
	ChubbyLoadedLease = 60 * time.Second
	// DefaultMaxEvents bounds each session's queue of unacknowledged events.
	DefaultMaxEvents = 1024
)

// Config configures a Manager. The zero value is usable: every zero field
// takes the default its doc names.
type Config struct {
	// Lease is how far a grant extends a session's lease: at creation and on
	// every KeepAlive the master receives or answers. SetLeaseExtension may
	// lengthen it under load, up to MaxLease. If zero, 12 s (Chubby's
	// default).
	Lease time.Duration

	// MaxLease is the longest lease any master of the cell grants: Lease
	// plus the largest load extension. A new master extends every session's
	// lease to MaxLease from the moment it starts, because that is the
	// longest the previous master may have been using (Chubby §2.9), so all
	// replicas must agree on it. If zero, MaxLease equals Lease: load
	// extension is off, and a fail-over grants one full Lease from now. It
	// must not be shorter than Lease.
	MaxLease time.Duration

	// KeepAliveEarly is how long before a session's lease would end the
	// master answers its parked KeepAlive. It must cover a network round
	// trip and the client's clock-drift margin, or the client's own (more
	// conservative) view of the lease ends before the answer arrives and the
	// client goes into jeopardy. If zero, Lease/8 (1.5 s for a 12 s lease).
	// It must be shorter than Lease.
	KeepAliveEarly time.Duration

	// KeepAliveCadence, if not zero, bounds how long the master parks a
	// KeepAlive: it answers one KeepAliveCadence after its arrival (or
	// KeepAliveEarly before the lease ends, or at the first event,
	// whichever comes first), and tells the client the cadence in every
	// reply. A client that hears nothing for the cadence and a margin
	// knows that its master is dead or cut off and looks for another,
	// long before its lease runs short: each reply proves a lease of
	// (Held+Lease) from the request's send, so a client answered on a
	// cadence C always holds at least about Lease−2C of lease (shortened
	// by its drift bound) and loses contact for at most C plus its margin
	// before it notices. Zero keeps Chubby's rule: park until
	// KeepAliveEarly before the lease ends, which leaves a client anywhere
	// between KeepAliveEarly and a whole Lease in hand and gives it no
	// way to tell a dead master from a parked KeepAlive. It must be
	// shorter than Lease−KeepAliveEarly to have any effect, and not
	// negative.
	KeepAliveCadence time.Duration

	// MaxEvents bounds each session's queue of unacknowledged events. An
	// event published to a full queue replaces the queue with a single
	// api.EventOverflow ("events lost, re-read") followed by the new event,
	// so memory stays bounded whatever a slow client does. If zero, 1024. It
	// must be at least 2.
	MaxEvents int

	// Epoch is the master epoch this Manager serves. It is carried on every
	// Reply and in fail-over events; the cell rejects requests naming other
	// epochs before they reach the Manager. Zero is allowed.
	Epoch uint64

	// Clock is the monotonic clock leases are measured on. If nil,
	// monotime.Real().
	Clock monotime.Clock

	// Logger receives the Manager's logs. If nil, slog.Default().
	Logger *slog.Logger
}

// populate returns c with every zero field replaced by its default.
func (c Config) populate() Config {
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.MaxLease == 0 {
		c.MaxLease = c.Lease
	}
	if c.KeepAliveEarly == 0 {
		c.KeepAliveEarly = c.Lease / 8
	}
	if c.MaxEvents == 0 {
		c.MaxEvents = DefaultMaxEvents
	}
	if c.Clock == nil {
		c.Clock = monotime.Real()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate reports the first contradiction in a populated config.
func (c Config) validate() error {
	switch {
	case c.Lease <= 0:
		return fmt.Errorf("%w: Lease %v is not positive", ErrBadConfig, c.Lease)
	case c.MaxLease < c.Lease:
		return fmt.Errorf("%w: MaxLease %v is shorter than Lease %v", ErrBadConfig, c.MaxLease, c.Lease)
	case c.KeepAliveEarly <= 0:
		return fmt.Errorf("%w: KeepAliveEarly %v is not positive", ErrBadConfig, c.KeepAliveEarly)
	case c.KeepAliveEarly >= c.Lease:
		return fmt.Errorf("%w: KeepAliveEarly %v is not shorter than Lease %v", ErrBadConfig, c.KeepAliveEarly, c.Lease)
	case c.KeepAliveCadence < 0:
		return fmt.Errorf("%w: KeepAliveCadence %v is negative", ErrBadConfig, c.KeepAliveCadence)
	case c.MaxEvents < 2:
		return fmt.Errorf("%w: MaxEvents %d is below 2", ErrBadConfig, c.MaxEvents)
	}
	return nil
}
