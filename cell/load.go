package cell

import "time"

// leaseExtensionFor decides the session-lease extension a master under load
// grants (Chubby §3: "the master may lengthen leases rather than fall
// over"): the full extension (max) while more than half of the proposal
// queue is in use, none once less than a tenth is, and otherwise the
// current one (hysteresis, so the extension does not flap).
func leaseExtensionFor(queued, capacity int, cur, max time.Duration) time.Duration {
	switch {
	case max <= 0 || capacity <= 0:
		return 0
	case queued*2 > capacity:
		return max
	case queued*10 < capacity:
		return 0
	}
	return cur
}

// loadLoop adjusts the lease extension once a second while this replica is
// master. It runs only if Config.MaxSessionLease exceeds SessionLease.
func (m *master) loadLoop() {
	defer m.wg.Done()
	max := m.deps.maxExtension
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var cur time.Duration
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		queued, capacity := m.deps.load()
		next := leaseExtensionFor(queued, capacity, cur, max)
		if next == cur {
			continue
		}
		if err := m.sessions.SetLeaseExtension(next); err != nil {
			m.deps.log.Warn("setting the lease extension", "err", err)
			continue
		}
		m.deps.log.Info("session lease extension changed with load", "extension", next)
		cur = next
	}
}
