package proccell

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/transport"
)

// ErrNoMaster reports that no replica serves as master (in time).
var ErrNoMaster = errors.New("proccell: no master")

// GetJSON fetches path ("/status") from replica id's HTTP listener and
// decodes the JSON answer into v.
func (c *Cell) GetJSON(ctx context.Context, id uint64, path string, v any) error {
	return c.call(ctx, id, http.MethodGet, path, nil, v)
}

// call sends method to path on replica id's HTTP listener with body (if
// not nil) and requires 200 OK; if out is not nil it decodes the JSON answer
// into it. Its errors name the replica, the method and the path.
func (c *Cell) call(ctx context.Context, id uint64, method, path string, body io.Reader, out any) error {
	r, err := c.rep(id)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+r.httpAddr+path, body)
	if err != nil {
		return err
	}
	resp, err := c.httpc.Do(req)
	if err != nil {
		return fmt.Errorf("proccell: replica %d: %s %s: %w", id, method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("proccell: replica %d: %s %s: %s: %s", id, method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("proccell: replica %d: %s %s: %w", id, method, path, err)
	}
	return nil
}

// Status fetches replica id's /status.
func (c *Cell) Status(ctx context.Context, id uint64) (*api.CellStatusResponse, error) {
	var st api.CellStatusResponse
	if err := c.GetJSON(ctx, id, "/status", &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// MasterSample is what a replica's status page says about its master role
// at the moment it answered.
type MasterSample struct {
	// Master reports that the replica served as master: the page's role is
	// computed by the same check that admits client requests, at request
	// time (a gauge updated by the run loop could lag, as after a pause).
	Master bool
	// Epoch is the ballot of the master the replica knows ("round.id"); a
	// replica that becomes master anew does so in a new epoch.
	Epoch string
	// Known is the replica the answering replica believes is master (0 if
	// it knows of none).
	Known uint64
}

// MasterOf fetches replica id's /status and reads its role and epoch.
func (c *Cell) MasterOf(ctx context.Context, id uint64) (MasterSample, error) {
	var ms MasterSample
	st, err := c.Status(ctx, id)
	if err != nil {
		return ms, err
	}
	if st.Replica != id {
		return ms, fmt.Errorf("proccell: status of replica %d answered by replica %d", id, st.Replica)
	}
	ms.Master, ms.Epoch, ms.Known = st.Role == api.RoleMaster, st.Epoch.String(), st.Master
	return ms, nil
}

// FindMaster asks every running, unpaused replica at once and returns the
// one whose status page says it serves as master (the lowest id if, for an
// instant, two say so). It fails with ErrNoMaster if none does.
func (c *Cell) FindMaster(ctx context.Context) (uint64, error) {
	type res struct {
		id uint64
		ms MasterSample
		ok bool
	}
	ids := c.IDs()
	ch := make(chan res, len(ids))
	for _, id := range ids {
		go func() {
			if run, _ := c.Running(id); !run || c.Paused(id) {
				ch <- res{id: id}
				return
			}
			mctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			ms, err := c.MasterOf(mctx, id)
			ch <- res{id, ms, err == nil}
		}()
	}
	var best uint64
	for range ids {
		r := <-ch
		if r.ok && r.ms.Master && (best == 0 || r.id < best) {
			best = r.id
		}
	}
	if best == 0 {
		return 0, ErrNoMaster
	}
	return best, nil
}

// WaitMaster polls until a replica serves as master or ctx ends.
func (c *Cell) WaitMaster(ctx context.Context) (uint64, error) {
	for {
		id, err := c.FindMaster(ctx)
		if err == nil {
			return id, nil
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return 0, fmt.Errorf("%w: %w", ErrNoMaster, ctx.Err())
		}
	}
}

// Healthy waits until every replica runs unpaused, answers /status, and
// one serves as master. It fails at once with ErrNotRunning if a replica
// is not running, and with ctx's error if the rest does not come in time.
func (c *Cell) Healthy(ctx context.Context) error {
	for {
		up, master := 0, false
		ids := c.IDs()
		for _, id := range ids {
			if run, _ := c.Running(id); !run {
				return fmt.Errorf("%w: replica %d (see %s)", ErrNotRunning, id, c.LogFile(id))
			}
			if c.Paused(id) {
				continue
			}
			if ms, err := c.MasterOf(ctx, id); err == nil {
				up++
				master = master || ms.Master
			}
		}
		if up == len(ids) && master {
			return nil
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return fmt.Errorf("proccell: cell not healthy (%d of %d replicas answer, master %v): %w", up, len(ids), master, ctx.Err())
		}
	}
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// FaultsAvailable reports whether replica id's /debug/faults answers (an
// error says why not: a cell without Config.FaultInjection has none).
func (c *Cell) FaultsAvailable(ctx context.Context, id uint64) error {
	var st transport.FaultState
	return c.GetJSON(ctx, id, "/debug/faults/", &st)
}

// SetFaults replaces replica id's fault rules with st.
func (c *Cell) SetFaults(ctx context.Context, id uint64, st transport.FaultState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return c.call(ctx, id, http.MethodPost, "/debug/faults/rules", bytes.NewReader(b), nil)
}

// SetFaultsRunning installs st on replica id, retrying for up to 5 s while
// its HTTP listener comes up (a replica restarted a moment ago). It fails
// with ErrNotRunning if the replica is not running or is paused.
func (c *Cell) SetFaultsRunning(ctx context.Context, id uint64, st transport.FaultState) error {
	deadline := time.Now().Add(c.setRetry)
	for {
		if run, _ := c.Running(id); !run || c.Paused(id) {
			return fmt.Errorf("%w: replica %d", ErrNotRunning, id)
		}
		err := c.SetFaults(ctx, id, st)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// HealAll removes every fault rule on every running replica. A replica
// that is down or paused is skipped: a restarted replica starts with no
// rules, and a paused one must be healed once it is continued. The error
// names the replicas that could not be healed.
func (c *Cell) HealAll(ctx context.Context) error {
	var errs []error
	for _, id := range c.IDs() {
		if err := c.SetFaultsRunning(ctx, id, transport.FaultState{}); err != nil && !errors.Is(err, ErrNotRunning) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Partition cuts the replicas in side off from the others: every running
// replica drops the peer messages that cross between side and the rest,
// in both directions (each replica gets the rules for its own messages,
// so a replica that misses its rules is still cut off by its peers).
// HealAll undoes it. A paused or stopped replica is skipped.
func (c *Cell) Partition(ctx context.Context, side []uint64) error {
	in := map[uint64]bool{}
	for _, id := range side {
		if _, err := c.rep(id); err != nil {
			return err
		}
		in[id] = true
	}
	var rules []transport.Rule
	for _, a := range c.IDs() {
		for _, b := range c.IDs() {
			if in[a] != in[b] {
				rules = append(rules, transport.Rule{From: a, To: b, Partition: true})
			}
		}
	}
	var errs []error
	for _, id := range c.IDs() {
		if err := c.SetFaultsRunning(ctx, id, transport.FaultState{Rules: rules}); err != nil && !errors.Is(err, ErrNotRunning) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
