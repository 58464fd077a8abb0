package nemesis

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	lockcelldOnce sync.Once
	lockcelldBin  string
	lockcelldErr  error
)

// testLockcelld builds lockcelld once for the package's tests.
func testLockcelld(t *testing.T) string {
	t.Helper()
	lockcelldOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nemesis-test-bin-")
		if err != nil {
			lockcelldErr = err
			return
		}
		lockcelldBin, lockcelldErr = BuildLockcelld(context.Background(), dir)
	})
	if lockcelldErr != nil {
		t.Fatal(lockcelldErr)
	}
	return lockcelldBin
}

// TestWeakenedRuns proves each checker family can fail: one short run per
// weakening, each of which the checker it targets — by name — must catch:
//
//	nofence   the resource does not check sequencers → fencing
//	skew      a replica's clock far beyond the drift bound → master-overlap
//	nofsync   replicas that do not fsync, all killed → ack-set
//	lockctx   lock contexts blind to the lease deadline → mutual-exclusion
//
// The runs are parallel tests: each waits out its schedule in real time
// and uses about one core, so they run -test.parallel at a time beside
// TestNemesisShort (each on its own cell, ports and directory).
func TestWeakenedRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs cells of real processes")
	}
	t.Parallel()
	bin := testLockcelld(t)
	durations := map[string]time.Duration{
		WeakenNoFence: 25 * time.Second,
		WeakenSkew:    30 * time.Second,
		WeakenNoFsync: 25 * time.Second,
		WeakenLockCtx: 35 * time.Second,
	}
	for i, w := range Weakenings() {
		t.Run(w, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			seed := uint64(time.Now().UnixNano()%1_000_000) + uint64(i)
			lease := 3 * time.Second
			if w == WeakenLockCtx {
				lease = 2 * time.Second // more zombie pauses
			}
			res, err := Run(ctx, Options{
				Duration: durations[w], Seed: seed, Weaken: w, SessionLease: lease, Lockcelld: bin,
				WorkerArgv: func(f string) []string { return []string{os.Args[0], "worker", f} },
			})
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			var sb strings.Builder
			res.WriteReport(&sb)
			t.Log("\n" + sb.String())
			if res.Target != TargetChecker(w) || !res.Detected() {
				t.Fatalf("%s", res.Verdict())
			}
		})
	}
}

// TestLockcelldInvariants: the replicas under fault injection run with
// their invariant checks on (the binary's build settings say -tags
// invariants).
func TestLockcelldInvariants(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lockcelld")
	}
	out, err := exec.Command("go", "version", "-m", testLockcelld(t)).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v: %s", err, out)
	}
	if !regexp.MustCompile(`(?m)^\s*build\s+-tags=(\S+,)?invariants(,\S+)?$`).Match(out) {
		t.Fatalf("lockcelld was built without -tags invariants:\n%s", out)
	}
}
