package cell

import (
	"slices"
	"sync"

	"github.com/lockcell/lockcell/namespace"
)

// sessionOwners is the master's map of live sessions to the principals that
// own them, and of each session to the tenant tokens it was created or used
// with, so that revoking a token ends its sessions (see auth.go). It is
// filled from the applied state when a master starts and kept in step by
// the commands applied while it serves; it reaches nothing else.
//
// Its methods are safe for concurrent use and never block.
type sessionOwners struct {
	mu struct {
		sync.Mutex
		// owners maps every live session to its principal.
		owners map[uint64]namespace.Caller
		// tokens maps a live session to the token IDs it was bound to.
		tokens map[uint64]map[string]struct{}
	}
}

func newSessionOwners() *sessionOwners {
	o := &sessionOwners{}
	o.mu.owners = map[uint64]namespace.Caller{}
	o.mu.tokens = map[uint64]map[string]struct{}{}
	return o
}

// add records that sess is live and owned by c.
func (o *sessionOwners) add(sess uint64, c namespace.Caller) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.mu.owners[sess] = c
}

// addAll records every session of list as live, owned by its tenant and
// principal, under one lock (a new master taking over the sessions of the
// applied state).
func (o *sessionOwners) addAll(list []namespace.SessionOwner) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.mu.owners) == 0 {
		o.mu.owners = make(map[uint64]namespace.Caller, len(list))
	}
	for _, s := range list {
		o.mu.owners[s.ID] = s.Owner
	}
}

// remove forgets sess and its token bindings (the session ended).
func (o *sessionOwners) remove(sess uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.mu.owners, sess)
	delete(o.mu.tokens, sess)
}

// owner returns the principal that owns the live session sess.
func (o *sessionOwners) owner(sess uint64) (namespace.Caller, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.mu.owners[sess]
	return c, ok
}

// bindToken records that sess was created or used with token id. A session
// that is not live is not bound: it could never be ended by a revocation,
// and the binding would outlive it.
func (o *sessionOwners) bindToken(sess uint64, id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, live := o.mu.owners[sess]; !live {
		return
	}
	ts := o.mu.tokens[sess]
	if ts == nil {
		ts = map[string]struct{}{}
		o.mu.tokens[sess] = ts
	}
	ts[id] = struct{}{}
}

// boundTo returns the live sessions bound to token id, in ascending order.
func (o *sessionOwners) boundTo(id string) []uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []uint64
	for sess, ts := range o.mu.tokens {
		if _, ok := ts[id]; ok {
			out = append(out, sess)
		}
	}
	slices.Sort(out)
	return out
}
