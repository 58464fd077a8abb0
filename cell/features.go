package cell

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
)

// Features is a set of command formats a replica's binary can apply,
// advertised in its progress reports. During a rolling upgrade a cell runs
// old and new binaries side by side; a master proposes a command in a new
// format only once every member has said it can apply it, since a replica
// that cannot would stop at that slot.
type Features uint64

const (
	// FeatureHandOver: Release, CloseSession and ExpireSession commands
	// that carry grants to the head waiters (one-round hand-over,
	// namespace.Grant).
	FeatureHandOver Features = 1 << iota
	// FeatureMembership: cell directory commands and membership changes in
	// the log (AddReplica, RemoveReplica, ReplaceReplica).
	FeatureMembership
	// FeatureHandOverRun: commands that carry several grants of one lock
	// (a run of shared waiters handed the lock in one slot), each tried as
	// its own Acquire; a binary without it tries only the first.
	FeatureHandOverRun
)

// AllFeatures is every feature this binary can apply: what it advertises.
const AllFeatures = FeatureHandOver | FeatureMembership | FeatureHandOverRun

// String names the features, for messages and logs.
func (f Features) String() string {
	var names []string
	if f&FeatureHandOver != 0 {
		names = append(names, "one-round lock hand-over")
	}
	if f&FeatureMembership != 0 {
		names = append(names, "membership change")
	}
	if f&FeatureHandOverRun != 0 {
		names = append(names, "hand-over to a run of shared waiters")
	}
	if rest := f &^ AllFeatures; rest != 0 {
		names = append(names, fmt.Sprintf("unknown features %#x", uint64(rest)))
	}
	if len(names) == 0 {
		return "no features"
	}
	return strings.Join(names, ", ")
}

// features is what this replica advertises.
func (r *Replica) features() Features {
	if r.cfg.featuresHook != nil {
		return r.cfg.featuresHook()
	}
	return AllFeatures
}

// featureWait is how long after becoming master the feature gate of a
// membership change waits for the reports of members it has not heard
// from yet: two idle report intervals, so that a change asked for right
// after an election is not refused for want of a report on its way.
const featureWait = 2 * progressIdleInterval

// featureMissing returns the members (voters and learners) of the cell
// other than those in except that have not advertised f in a progress report
// received since m became master, in ascending order; this replica counts
// by its own features. Empty means m may propose commands that need f.
// Safe from any goroutine.
func (r *Replica) featureMissing(m *master, f Features, except ...uint64) []uint64 {
	var missing []uint64
	for _, id := range members(r.members.view().Members) {
		if slices.Contains(except, id) {
			continue
		}
		if id == r.cfg.ID {
			if r.features()&f != f {
				missing = append(missing, id)
			}
			continue
		}
		p, ok := r.progress.get(id)
		if !ok || p.at.Before(m.since) || Features(p.Features)&f != f {
			missing = append(missing, id)
		}
	}
	slices.Sort(missing)
	return missing
}

// featureGate refuses, with FailedPrecondition naming the replicas, a
// request that needs f while some member not in except has not
// advertised it (see featureMissing). Within featureWait of m's start it
// first waits for the reports still to come.
func (r *Replica) featureGate(ctx context.Context, m *master, f Features, except ...uint64) error {
	missing := r.featureMissing(m, f, except...)
	for len(missing) > 0 && monotime.Now().Before(m.since.Add(featureWait)) {
		select {
		case <-time.After(progressInterval):
		case <-ctx.Done():
			return ctxError(ctx)
		}
		missing = r.featureMissing(m, f, except...)
	}
	if len(missing) == 0 {
		return nil
	}
	ids := make([]string, len(missing))
	for i, id := range missing {
		ids[i] = strconv.FormatUint(id, 10)
	}
	word := "replica"
	if len(ids) > 1 {
		word = "replicas"
	}
	return apiErr(api.FailedPrecondition, fmt.Sprintf("%s %s runs a binary without %s (or has not reported to this master since it took over); upgrade every replica first", word, strings.Join(ids, ", "), f))
}
