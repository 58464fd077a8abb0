package main

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
)

// The replace-a-replica runbook of docs/operations.md on real `lockcelld
// serve` processes talking QUIC: the new replica is prepared with
// `lockcelld init --join`, started, and made a member with `lockctl cell
// replace-replica`, while the load of TestRollingRestart runs (three
// sessions take turns on one lock and increment a counter under it, a
// fourth creates files) and a probe writes without pause. Nothing is
// timed but the probe's longest gap, judged against the session lease: a
// cell that went without a quorum for that long would have put every
// session in jeopardy.

// startReplaceCell starts a cell of five that takes a snapshot (and
// compacts its log) every replaceSnapshotEvery slots, so that a new
// replica catches up by snapshot first, as one of a cell that ran for a
// while does.
func startReplaceCell(t *testing.T) *procCell {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	c := initProcCellExtra(t, "replace", 5, map[string]any{"snapshot_every": replaceSnapshotEvery})
	for id := 1; id <= 5; id++ {
		c.start(id)
	}
	c.setupTenant()
	return c
}

const replaceSnapshotEvery = 50

// replaceGapBound is the longest the probe may go without an acknowledged
// write: the session lease. A fail-over ends well within it (DESIGN.md,
// "Defaults"); a cell without a quorum for that long fails the test.
const replaceGapBound = cell.DefaultSessionLease

// TestReplaceKilledReplica: a follower of five is killed for good (its
// process SIGKILLed, its data directory deleted) and replaced by a new
// replica at another address. The new replica catches up and votes, the
// dead one is no member any more, and no session, lock or acknowledged
// write was lost.
func TestReplaceKilledReplica(t *testing.T) {
	began := time.Now()
	c := startReplaceCell(t)
	lockctl := lockctlBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l := c.startRollLoad(ctx, 3)
	defer l.stop()
	p := c.startQuorumProbe(ctx, "/t/replace-probe")
	defer p.stop()
	c.rollWaitProgress(ctx, l, "the load to start")
	t.Logf("%v: cell of five up, load running: %s", time.Since(began).Round(time.Millisecond), l.summary())

	victim := c.followers(c.waitMaster())[0]
	if err := c.pc.Retire(ctx, uint64(victim), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v: replica %d killed for good, its data deleted", time.Since(began).Round(time.Millisecond), victim)
	c.rollWaitProgress(ctx, l, fmt.Sprintf("the load to go on without replica %d", victim))

	c.replace(ctx, lockctl, victim, 6)
	t.Logf("%v: replica %d replaced by 6; %s; %s", time.Since(began).Round(time.Millisecond), victim, l.summary(), p.summary())

	want := slices.DeleteFunc([]int{1, 2, 3, 4, 5, 6}, func(id int) bool { return id == victim })
	c.checkMembers(ctx, 6, want, victim)
	p.check(c, 20, replaceGapBound)
	c.rollWaitProgress(ctx, l, "the load to go on after the replacement")
	l.stop()
	c.rollWaitCaughtUp(ctx, 0)
	c.waitConverged(ctx)
	l.check(c)
	out, err := exec.CommandContext(ctx, lockctl, "--config", filepath.Join(c.dir, "admin.json"), "status").CombinedOutput()
	t.Logf("$ lockctl status (%v)\n%s", err, out)
}

// TestReplaceThreeOfFive: three of five replicas are replaced one after
// another, as the runbook says (the new one prepared and started, then
// replace-replica, then the old one stopped for good), two followers and
// then the master; the cell keeps serving throughout and ends with the
// two original replicas and three new ones.
func TestReplaceThreeOfFive(t *testing.T) {
	began := time.Now()
	c := startReplaceCell(t)
	lockctl := lockctlBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	l := c.startRollLoad(ctx, 3)
	defer l.stop()
	p := c.startQuorumProbe(ctx, "/t/replace-probe")
	defer p.stop()
	c.rollWaitProgress(ctx, l, "the load to start")
	t.Logf("%v: cell of five up, load running: %s", time.Since(began).Round(time.Millisecond), l.summary())

	members := []int{1, 2, 3, 4, 5}
	masterReplaced := false
	for i, next := range []int{6, 7, 8} {
		m := c.waitMaster()
		old := 0
		if i < 2 {
			// A follower that is one of the originals.
			for _, f := range c.followers(m) {
				if f <= 5 {
					old = f
					break
				}
			}
		} else {
			old = m
			masterReplaced = old <= 5
			if !masterReplaced {
				// The master moved to a new replica on its own: replace
				// an original follower instead.
				for _, f := range c.followers(m) {
					if f <= 5 {
						old = f
						break
					}
				}
			}
		}
		c.replace(ctx, lockctl, old, next)
		// The old replica, no member any more, is stopped for good.
		if err := c.pc.Retire(ctx, uint64(old), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		members = append(slices.DeleteFunc(members, func(id int) bool { return id == old }), next)
		c.checkMembers(ctx, next, members, old)
		c.rollWaitProgress(ctx, l, fmt.Sprintf("the load to go on after replica %d replaced %d", next, old))
		t.Logf("%v: replica %d replaced by %d (master before: %d); %s; %s", time.Since(began).Round(time.Millisecond), old, next, m, l.summary(), p.summary())
	}
	if !masterReplaced {
		t.Log("the master had moved to a new replica by itself before the third replacement; a follower was replaced instead")
	}
	p.check(c, 30, replaceGapBound)
	l.stop()
	c.rollWaitCaughtUp(ctx, 0)
	c.waitConverged(ctx)
	l.check(c)
}

// replace follows the runbook for one replica: `lockcelld init --join`
// for replica next at a new address (through proccell, which also picks
// the ports), its start, and `lockctl cell replace-replica old next ADDR`;
// then it waits until next is ready and has caught up.
func (c *procCell) replace(ctx context.Context, lockctl string, old, next int) {
	c.t.Helper()
	addr, err := c.pc.JoinReplica(ctx, uint64(next))
	if err != nil {
		c.t.Fatal(err)
	}
	c.start(next)
	// The new replica runs, outside the membership: alive, not ready.
	var code int
	var body string
	if !pollUntil(ctx, func() bool { code, body = c.probe(ctx, next, "/healthz"); return code == http.StatusOK }) {
		c.t.Fatalf("new replica %d never alive: /healthz %d %q", next, code, body)
	}
	if code, body = c.probe(ctx, next, "/readyz"); code == http.StatusOK {
		c.t.Errorf("new replica %d, not a member yet, answers /readyz 200 %q", next, body)
	}
	c.t.Logf("new replica %d before it is added: /readyz %d %q", next, code, body)
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	args := []string{"--config", filepath.Join(c.dir, "admin.json"), "--timeout", "2m", "cell", "replace-replica", strconv.Itoa(old), strconv.Itoa(next), addr}
	out, err := exec.CommandContext(rctx, lockctl, args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("lockctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	c.t.Logf("$ lockctl cell replace-replica %d %d %s\n%s", old, next, addr, strings.TrimSpace(string(out)))
	c.rollWaitCaughtUp(ctx, next)
	// It started empty in a cell that had compacted its log: it caught up
	// by snapshot.
	if n, ok := c.metric(next, "lockcell_snapshots_installed_total"); !ok || n < 1 {
		c.t.Errorf("replica %d installed %v snapshots (metric found: %v); want it caught up by snapshot", next, n, ok)
	}
}

// checkMembers asks the cell, by repeating the replacement of old by next
// (which must change nothing), for its membership, and requires voters to
// be exactly want, with no learner and no trace of old.
func (c *procCell) checkMembers(ctx context.Context, next int, want []int, old int) {
	c.t.Helper()
	ac := c.adminClient(ctx)
	defer ac.Close()
	resp, err := operator.New(ac).ReplaceReplica(ctx, uint64(old), uint64(next), c.pc.Addr(uint64(next)))
	if err != nil {
		c.t.Fatalf("replace-replica %d %d again: %v", old, next, err)
	}
	var voters []int
	for _, v := range resp.Voters {
		voters = append(voters, int(v))
	}
	slices.Sort(want)
	if !slices.Equal(voters, want) || len(resp.Learners) > 0 || len(resp.Steps) > 0 {
		c.t.Fatalf("after replacing %d by %d: voters %v, learners %v, steps of the repeated request %q; want voters %v, no learner, no step",
			old, next, resp.Voters, resp.Learners, resp.Steps, want)
	}
	if _, ok := resp.Addrs[uint64(old)]; ok {
		c.t.Errorf("the membership still has an address for replica %d: %v", old, resp.Addrs)
	}
	if resp.Addrs[uint64(next)] != c.pc.Addr(uint64(next)) {
		c.t.Errorf("the membership has replica %d at %q; want %s", next, resp.Addrs[uint64(next)], c.pc.Addr(uint64(next)))
	}
}

// adminClient dials the cell as its administrator, with the settings
// lockcelld init wrote (and init --join extended).
func (c *procCell) adminClient(ctx context.Context) *client.Client {
	c.t.Helper()
	f, err := client.ReadConfigFile(filepath.Join(c.dir, "admin.json"))
	if err != nil {
		c.t.Fatal(err)
	}
	cfg, err := f.Config(true)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg.Logger = c.tenant.Logger
	cfg.ReconnectMax = 200 * time.Millisecond
	ac, err := client.Dial(ctx, cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	return ac
}

// waitConverged waits until every replica reports the same applied slot
// and checksum, failing on two that applied the same slot differently.
func (c *procCell) waitConverged(ctx context.Context) {
	c.t.Helper()
	var diverged string
	if !pollUntil(ctx, func() bool {
		if diverged = c.diverged(); diverged != "" {
			return true
		}
		return c.converged()
	}) {
		c.t.Fatalf("the replicas %v never converged", c.ids())
	}
	if diverged != "" {
		c.t.Fatal(diverged)
	}
	st, _ := c.status(c.ids()[0])
	c.t.Logf("replicas %v converged at slot %d, checksum %s", c.ids(), st.Applied, st.Checksum)
}
