package cell

import (
	"fmt"
	"github.com/lockcell/lockcell/api"
	"sync"
	"time"

	"github.com/lockcell/lockcell/internal/monotime"
)

// tagProgress tags progress reports on the peer mesh.
const tagProgress uint16 = 2

// progressInterval is how often a replica reports its progress to its
// peers while it changes.
const progressInterval = 100 * time.Millisecond

// progressIdleInterval is how often a replica repeats a report that has
// not changed since it last sent it: the peers learn nothing new from it,
// only that the replica is there (readiness wants the master heard within
// readyHeardWithin, four of these), and an idle cell of five replicas
// otherwise exchanged 200 such reports a second, the bulk of its packets.
const progressIdleInterval = 500 * time.Millisecond

// ReadyMaxLag is how many slots a replica may have applied fewer than the
// master last reported chosen and still be ready (/readyz).
const ReadyMaxLag = 1000

// readyHeardWithin is how recently a replica that is not the master must
// have heard the master's progress report to be ready: many report
// intervals, so that one lost report or a busy machine does not flap it.
const readyHeardWithin = 20 * progressInterval

// progressReport is what a replica tells its peers of itself every
// progressInterval: the same facts it shows on its own status page, so that
// every replica's status can show every replica's progress. It carries no
// authority: nothing in the protocol depends on it.
type progressReport struct {
	Role    api.Role `msgpack:"ro"`
	Epoch   uint64   `msgpack:"e"`
	Leader  uint64   `msgpack:"l"`
	Chosen  uint64   `msgpack:"c"`
	Applied uint64   `msgpack:"a"`
	// Master reports that the sender holds the master lease and serves.
	Master bool `msgpack:"m,omitempty"`
	// SumSlot and Sum are the sender's latest applied slot and its state
	// checksum there, read together, for the peers to compare
	// (compare.go). Zero if unknown.
	SumSlot uint64 `msgpack:"ss,omitempty"`
	Sum     uint64 `msgpack:"cs,omitempty"`
	// DirSum is the checksum of the sender's replica directory at SumSlot
	// (directory.go). A binary older than the field sends none (zero),
	// and its directory is then not compared.
	DirSum uint64 `msgpack:"ds,omitempty"`
	// Features are the command formats the sender's binary can apply
	// (features.go). A binary older than the field sends none, and reads
	// past it.
	Features uint64 `msgpack:"f,omitempty"`
}

// peerProgress is the latest report of one peer and when it arrived.
type peerProgress struct {
	progressReport
	at monotime.Time
}

// progressTable holds the latest progress report of each peer. The run
// loop writes it; status handlers read it.
type progressTable struct {
	mu struct {
		sync.Mutex
		last map[uint64]peerProgress
	}
	// sent is when this replica last sent its own report, and last that
	// report (run loop only).
	sent monotime.Time
	last progressReport
}

// record stores a peer's report.
func (t *progressTable) record(from uint64, rep progressReport, now monotime.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.last == nil {
		t.mu.last = map[uint64]peerProgress{}
	}
	t.mu.last[from] = peerProgress{progressReport: rep, at: now}
}

// get returns peer id's latest report, if any.
func (t *progressTable) get(id uint64) (peerProgress, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.mu.last[id]
	return p, ok
}

// maybeReportProgress sends this replica's progress to every peer once
// progressInterval has passed since the last report, or, if the report is
// the same as the last, once progressIdleInterval has. Run loop only.
func (r *Replica) maybeReportProgress(now monotime.Time) {
	if r.progress.sent != 0 && now.Sub(r.progress.sent) < progressInterval {
		return
	}
	st := r.Status()
	rep := progressReport{Role: st.Role, Epoch: st.Epoch, Leader: st.Leader, Chosen: st.Chosen, Applied: st.Applied, Master: st.Master}
	rep.SumSlot, rep.Sum, rep.DirSum = r.sums.latest()
	rep.Features = uint64(r.features())
	if r.progress.sent != 0 && rep == r.progress.last && now.Sub(r.progress.sent) < progressIdleInterval {
		return
	}
	r.progress.sent, r.progress.last = now, rep
	for _, id := range r.ep.Peers() {
		if err := r.ep.Send(id, tagProgress, &rep); err != nil {
			r.log.Debug("send progress", "to", id, "err", err)
		}
	}
}

// stepProgress records a peer's progress report.
func (r *Replica) stepProgress(from uint64, body func(any) error) {
	var rep progressReport
	if err := body(&rep); err != nil {
		r.metrics.badPeerMessages.Inc()
		return
	}
	r.progress.record(from, rep, monotime.Now())
	r.sums.compare(r.log, r.cfg.ID, from, rep.SumSlot, rep.Sum, rep.DirSum)
}

// readiness says whether this replica is ready to be part of the cell: it
// runs, votes (no rebuild in progress), and either is the master or hears
// a master whose chosen slot it has applied within ReadyMaxLag. The reason
// says why not, in words for an operator.
func (r *Replica) readiness() (ok bool, reason string) {
	select {
	case <-r.done:
		return false, fmt.Sprintf("stopped: %v", r.Err())
	default:
	}
	st := r.Status()
	if st.Rebuild.Rebuilding() {
		return false, "rebuilding: this replica lost durable state and learns from its peers before it votes (" + st.Rebuild.String() + ")"
	}
	if st.Master {
		return true, fmt.Sprintf("ok: master, epoch %s, applied slot %d", api.Epoch(st.Epoch), st.Applied)
	}
	if st.Leader == 0 || st.Leader == r.cfg.ID {
		return false, fmt.Sprintf("no master: this replica (%s, epoch %s) knows of no master that serves; is a majority of the cell running and connected?", st.Role, api.Epoch(st.Epoch))
	}
	p, heard := r.progress.get(st.Leader)
	if !heard {
		return false, fmt.Sprintf("no master heard: replica %d leads as far as this replica knows, but has sent it no report", st.Leader)
	}
	if ago := monotime.Now().Sub(p.at); ago > readyHeardWithin {
		return false, fmt.Sprintf("no master heard: the last report of replica %d (the leader as far as this replica knows) came %v ago", st.Leader, ago.Round(time.Millisecond))
	}
	if !p.Master {
		return false, fmt.Sprintf("no master: replica %d leads (%s) but holds no master lease; is a majority of the cell running and connected?", st.Leader, p.Role)
	}
	if p.Chosen > st.Applied && p.Chosen-st.Applied > ReadyMaxLag {
		return false, fmt.Sprintf("behind: applied slot %d, the master's chosen slot %d (more than %d behind)", st.Applied, p.Chosen, ReadyMaxLag)
	}
	return true, fmt.Sprintf("ok: master is replica %d, epoch %s, applied slot %d", st.Leader, api.Epoch(p.Epoch), st.Applied)
}
