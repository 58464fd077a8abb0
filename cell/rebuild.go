package cell

import (
	"fmt"
	"github.com/lockcell/lockcell/api"
	"time"

	"github.com/lockcell/lockcell/paxos"
)

// RebuildStatus describes a replica that started without (some of) its
// durable state: what it lost, and how far its rebuild has come. While it
// rebuilds the replica is a learner: it promises, accepts and grants
// nothing (paxos/doc.go, "Lost state").
type RebuildStatus struct {
	// Kind classifies the loss: "wiped" (no state and no new-member
	// marker), "corrupt" (the store was damaged and moved aside),
	// "behind-guard" (the log lost acknowledged writes), "guard-missing",
	// "guard-damaged" (the evidence of the store's progress is gone), or
	// "rebuild-interrupted" (a restart in the middle of a rebuild).
	Kind string `json:"kind"`
	// Reason says what was found.
	Reason string `json:"reason"`
	// MovedAside is where the damaged store was moved, if it was.
	MovedAside string `json:"moved_aside,omitempty"`
	// Since is when the replica started rebuilding.
	Since time.Time `json:"since"`
	// Phase is the rebuild's phase, "done" once the replica votes again.
	Phase string `json:"phase"`
	// Target is the slot the replica must know chosen before it votes (0
	// until known).
	Target uint64 `json:"target,omitempty"`
	// Done is when the replica voted again (zero while rebuilding).
	Done time.Time `json:"done,omitzero"`
}

// Rebuilding reports whether the replica is still rebuilding.
func (s *RebuildStatus) Rebuilding() bool { return s != nil && s.Done.IsZero() }

// String describes the rebuild on one line.
func (s *RebuildStatus) String() string {
	if s == nil {
		return ""
	}
	out := fmt.Sprintf("lost state (%s): %s", s.Kind, s.Reason)
	if s.MovedAside != "" {
		out += "; damaged store moved to " + s.MovedAside
	}
	if s.Done.IsZero() {
		return out + "; rebuilding: " + s.Phase
	}
	return out + "; rebuilt, voting again since " + s.Done.UTC().Format(time.RFC3339)
}

// rebuildPhase describes the core's rebuild phase for people.
func rebuildPhase(st *paxos.Status) string {
	rb := st.Rebuild
	switch rb.Phase {
	case paxos.RebuildWaiting:
		return fmt.Sprintf("%s (%d ticks left)", rb.Phase, rb.TicksLeft)
	case paxos.RebuildProbing:
		return fmt.Sprintf("%s (%d of %d answered)", rb.Phase, rb.Answers, rb.Needed)
	case paxos.RebuildCatchingUp:
		return fmt.Sprintf("%s (chosen %d of %d)", rb.Phase, st.Chosen, rb.Target)
	case paxos.RebuildNone:
		return "done"
	}
	return rb.Phase.String()
}

// reportLoss announces, at start, that the replica lost state: a log line
// an operator cannot miss, the loss metric and the status.
func (r *Replica) reportLoss(st *paxos.Status) {
	loss := r.store.loss
	if loss == nil {
		if r.store.fresh {
			r.log.Info("new member of a new cell: starting with an empty store")
		}
		return
	}
	rs := &RebuildStatus{Kind: loss.Kind, Reason: loss.Detail, MovedAside: loss.MovedAside, Since: time.Now(), Phase: rebuildPhase(st)}
	r.rebuild.Store(rs)
	r.metrics.losses.WithLabelValues(loss.Kind).Inc()
	if loss.MovedAside != "" {
		r.metrics.movedAside.Inc()
	}
	r.log.Error("REPLICA LOST DURABLE STATE: it votes in nothing (no promise, no accept, no lease grant) until it has rebuilt from its peers; nothing for an operator to do unless a majority is affected",
		"kind", loss.Kind, "reason", loss.Detail, "moved_aside", loss.MovedAside, "applied", r.ns.AppliedSlot())
}

// observeRebuild updates the rebuild's status from the core's.
func (r *Replica) observeRebuild(st *paxos.Status) {
	prev := r.rebuild.Load()
	if !prev.Rebuilding() {
		return
	}
	next := *prev
	next.Phase, next.Target = rebuildPhase(st), uint64(st.Rebuild.Target)
	if st.Rebuild.Phase == paxos.RebuildNone {
		next.Done = time.Now()
	}
	r.rebuild.Store(&next)
}

// rebuilt announces the end of a rebuild.
func (r *Replica) rebuilt(st *paxos.Status) {
	rs := r.rebuild.Load()
	took := time.Duration(0)
	if rs != nil {
		took = time.Since(rs.Since)
	}
	r.log.Warn("rebuild complete: the replica votes again", "chosen", st.Chosen, "applied", r.ns.AppliedSlot(), "promised", st.Promised.String(), "took", took.Round(time.Millisecond))
}

// role names what the replica does now, for status displays.
func (r *Replica) role(st *paxos.Status) api.Role {
	switch {
	case r.serving() != nil:
		return api.RoleMaster
	case st.Rebuild.Phase != paxos.RebuildNone:
		return api.RoleLearner
	case st.IsLeader:
		return api.RoleLeader
	case st.Role == paxos.Candidate:
		return api.RoleCandidate
	}
	return api.RoleFollower
}
