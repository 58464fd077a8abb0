package client

import (
	"github.com/lockcell/lockcell/api"
)

// emit queues an event for OnEvent and the Events channel, and starts
// their delivery unless it is under way.
func (s *Session) emit(ev Event) {
	s.dispatch.Lock()
	s.dispatch.queue = append(s.dispatch.queue, ev)
	start := !s.dispatch.running
	s.dispatch.running = true
	s.dispatch.Unlock()
	if start {
		go s.dispatchEvents()
	}
}

// dispatchEvents delivers the queued events in order, until the queue is
// empty; a slow OnEvent delays only later events, never the KeepAlive
// loop.
func (s *Session) dispatchEvents() {
	for {
		s.dispatch.Lock()
		q := s.dispatch.queue
		s.dispatch.queue = nil
		if len(q) == 0 {
			s.dispatch.running = false
			s.dispatch.Unlock()
			return
		}
		s.dispatch.Unlock()
		for _, ev := range q {
			if s.cfg.OnEvent != nil {
				s.cfg.OnEvent(s, ev)
			}
			s.deliver(ev)
		}
	}
}

// deliver puts ev into the Events channel, or among the early events if
// nobody asked for the channel yet; an event that finds no room is
// dropped and counted.
func (s *Session) deliver(ev Event) {
	s.dispatch.Lock()
	ok := true
	if ch := s.dispatch.events; ch != nil {
		select {
		case ch <- ev:
		default:
			ok = false
		}
	} else if len(s.dispatch.early) < s.cfg.EventBuffer {
		s.dispatch.early = append(s.dispatch.early, ev)
	} else {
		ok = false
	}
	s.dispatch.Unlock()
	if !ok {
		s.mu.Lock()
		s.mu.dropped++
		s.mu.Unlock()
	}
}

// watchPath returns a channel that receives a signal after every event on
// path and every session-wide event (fail-over, overflow, safe, expiry),
// and a function that stops it.
func (s *Session) watchPath(path string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	m := s.mu.watch[path]
	if m == nil {
		m = map[chan struct{}]struct{}{}
		s.mu.watch[path] = m
	}
	m[ch] = struct{}{}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.mu.watch[path], ch)
		if len(s.mu.watch[path]) == 0 {
			delete(s.mu.watch, path)
		}
		s.mu.Unlock()
	}
}

// wakeWatchers signals the watchers of path, or of every path if path is
// empty.
func (s *Session) wakeWatchers(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, m := range s.mu.watch {
		if path != "" && p != path {
			continue
		}
		for ch := range m {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// nodeEvent applies one master event: cache invalidation, lost locks,
// watchers, and delivery to the user.
func (s *Session) nodeEvent(ev api.Event) {
	switch ev.Kind {
	case api.EventMasterFailover:
		s.cache.flush()
		s.emit(Event{Kind: EventFailover, Node: ev})
		s.wakeWatchers("")
		return
	case api.EventOverflow:
		s.cache.flush()
		s.wakeWatchers("")
	case api.EventHandleInvalid:
		s.cache.invalidate(ev.Path)
		s.mu.Lock()
		var lost []*Lock
		for l := range s.mu.locks {
			if l.h.h.Path == ev.Path && (ev.Instance == 0 || l.h.h.Instance == ev.Instance) {
				lost = append(lost, l)
				delete(s.mu.locks, l)
				l.gone = ErrHandleInvalid
			}
		}
		s.mu.Unlock()
		for _, l := range lost {
			l.lost(ErrHandleInvalid)
		}
		s.wakeWatchers(ev.Path)
	case api.EventContentsModified, api.EventChildAdded, api.EventChildRemoved:
		s.cache.invalidate(ev.Path)
		s.wakeWatchers(ev.Path)
	default:
		s.wakeWatchers(ev.Path)
	}
	s.emit(Event{Kind: EventNode, Node: ev})
}
