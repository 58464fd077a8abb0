package cell

import (
	"errors"
	"sync"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
)

// subscriptions holds the event subscriptions of the open handles at this
// master: which sessions watch which path for which events (api.EventMask),
// and turns the node changes of applied commands into events for them.
//
// Every event goes only to a session whose principal may read the node
// when the event is published: permission is checked when a session
// subscribes, and again for each event, because an ACL change (of the node,
// or of the contents of an ACL file it names) may have taken it away since.
// Subscriptions live in master memory only; clients re-establish them on
// their next call after a fail-over (handles are self-describing).
//
// Its methods are safe for concurrent use. publish and mayRead read the
// namespace (through allowed) and must not be called with a lock held that
// the run loop needs.
type subscriptions struct {
	// owner returns the principal of a live session.
	owner func(sess uint64) (namespace.Caller, bool)
	// allowed reports whether caller may read path now; an error of kind
	// api.ErrNotFound means the node does not exist.
	allowed func(caller namespace.Caller, path string) (bool, error)
	// deliver queues ev for sess; its KeepAlive carries it to the client.
	deliver func(sess uint64, ev api.Event)

	mu struct {
		sync.Mutex
		// subs maps a path to the sessions watching it and what they want.
		subs map[string]map[uint64]api.EventMask
	}
}

func newSubscriptions(owner func(uint64) (namespace.Caller, bool), allowed func(namespace.Caller, string) (bool, error), deliver func(uint64, api.Event)) *subscriptions {
	s := &subscriptions{owner: owner, allowed: allowed, deliver: deliver}
	s.mu.subs = map[string]map[uint64]api.EventMask{}
	return s
}

// subscribe records that session sess (of caller) watches path for the
// events in mask, if caller may read the node; a caller that may not is not
// subscribed (the handle's events are the caller's word, like its path).
func (s *subscriptions) subscribe(caller namespace.Caller, sess uint64, path string, mask api.EventMask) {
	if mask == 0 {
		return
	}
	s.mu.Lock()
	have := s.mu.subs[path][sess]
	s.mu.Unlock()
	if have&mask == mask {
		return // already subscribed (checked when it was)
	}
	if ok, err := s.allowed(caller, path); err != nil || !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	subs := s.mu.subs[path]
	if subs == nil {
		subs = map[uint64]api.EventMask{}
		s.mu.subs[path] = subs
	}
	subs[sess] |= mask
}

// unsubscribe forgets session sess's watch on path.
func (s *subscriptions) unsubscribe(sess uint64, path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(path, sess)
}

// forgetSession forgets every watch of session sess (it ended).
func (s *subscriptions) forgetSession(sess uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for path := range s.mu.subs {
		s.dropLocked(path, sess)
	}
}

// REQUIRES: s.mu held.
func (s *subscriptions) dropLocked(path string, sess uint64) {
	if subs := s.mu.subs[path]; subs != nil {
		delete(subs, sess)
		if len(subs) == 0 {
			delete(s.mu.subs, path)
		}
	}
}

// watched reports whether any session watches path.
func (s *subscriptions) watched(path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.subs[path]) > 0
}

// publish sends ev to every session watching ev.Path for any event in want
// whose principal may read the node now. For a deleted node
// (api.EventHandleInvalid) "may read" means the namespace would tell the
// caller NotFound rather than PermissionDenied.
func (s *subscriptions) publish(want api.EventMask, ev api.Event) {
	s.mu.Lock()
	var to []uint64
	for sess, mask := range s.mu.subs[ev.Path] {
		if mask&want != 0 {
			to = append(to, sess)
		}
	}
	s.mu.Unlock()
	for _, sess := range to {
		caller, _ := s.owner(sess)
		if !s.mayRead(caller, ev.Path, ev.Kind == api.EventHandleInvalid) {
			continue
		}
		s.deliver(sess, ev)
	}
}

// conflict tells the sessions watching path for api.WantConflictingLock
// (the holders of its lock) that someone waits for it. It does not block:
// the events are published on a goroutine of their own.
func (s *subscriptions) conflict(path string) {
	if !s.watched(path) {
		return
	}
	go s.publish(api.WantConflictingLock, api.Event{Kind: api.EventConflictingLock, Path: path})
}

// mayRead reports whether caller may read path now. With gone, a node that
// no longer exists counts as readable if the caller may read its nearest
// existing ancestor (it would be told NotFound). A caller without a
// principal (a session that ended) may read nothing.
func (s *subscriptions) mayRead(caller namespace.Caller, path string, gone bool) bool {
	if caller.Principal == "" {
		return false
	}
	ok, err := s.allowed(caller, path)
	if err == nil {
		return ok
	}
	return gone && errors.Is(err, api.ErrNotFound)
}

// publishChange publishes the event of one applied node change. A deleted
// node's handles are all invalid, whatever they asked for, and its watches
// end with it.
func (s *subscriptions) publishChange(ch namespace.NodeChange) {
	switch ch.Kind {
	case namespace.ChangeContents:
		s.publish(api.WantContentsModified, api.Event{Kind: api.EventContentsModified, Path: ch.Path, Instance: ch.Instance})
	case namespace.ChangeChildAdded:
		s.publish(api.WantChildAdded, api.Event{Kind: api.EventChildAdded, Path: ch.Path, Child: ch.Child, Instance: ch.Instance})
	case namespace.ChangeChildRemoved:
		s.publish(api.WantChildRemoved, api.Event{Kind: api.EventChildRemoved, Path: ch.Path, Child: ch.Child, Instance: ch.Instance})
	case namespace.ChangeLockAcquired:
		s.publish(api.WantLockAcquired, api.Event{Kind: api.EventLockAcquired, Path: ch.Path, Instance: ch.Instance})
	case namespace.ChangeDeleted:
		s.publish(^api.EventMask(0), api.Event{Kind: api.EventHandleInvalid, Path: ch.Path, Instance: ch.Instance})
		s.mu.Lock()
		delete(s.mu.subs, ch.Path)
		s.mu.Unlock()
	}
}
