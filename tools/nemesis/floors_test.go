package nemesis

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/proccell"
	"github.com/lockcell/lockcell/tools/fencedkv"
)

// TestFloors: a run that judged nothing fails every floor; one that
// judged enough passes; one fault kind never applied fails its own floor;
// an undecided porcupine check is a violation.
func TestFloors(t *testing.T) {
	opts := Options{Duration: 10 * time.Minute}
	floors := FloorsFor(opts)
	for _, k := range []string{CheckerFencing, CheckerLostUpdate, CheckerMutex, FloorZombies, FloorStaleAttempted, FloorStaleRefused,
		CheckerAckSet, CheckerLinearizable, CheckerOverlap, CheckerChecksums, floorFaultPrefix + FaultKillAll, floorFaultPrefix + FaultSlowFsync} {
		if floors[k] < 1 {
			t.Fatalf("no floor for %s: %v", k, floors)
		}
	}
	empty := &Result{}
	if vs := CheckFloors(empty, floors); len(vs) != len(floors) {
		t.Fatalf("an empty run: %d floor violations for %d floors: %v", len(vs), len(floors), vs)
	}
	full := &Result{Judged: map[string]int{}, Faults: map[string]int{}}
	for k, f := range floors {
		full.Judged[k] = f
		if kind, ok := strings.CutPrefix(k, floorFaultPrefix); ok {
			full.Faults[kind] = 1
		}
	}
	if vs := CheckFloors(full, floors); len(vs) != 0 {
		t.Fatalf("a run at its floors: %v", vs)
	}
	full.Faults[FaultOneWay] = 0
	full.Judged[FloorStaleRefused] = floors[FloorStaleRefused] - 1
	vs := CheckFloors(full, floors)
	if len(vs) != 2 || vs[0].Checker != CheckerFloor || !strings.Contains(vs[0].Text, FaultOneWay) || !strings.Contains(vs[1].Text, FloorStaleRefused) {
		t.Fatalf("a fault kind never applied and too few refusals: %v", vs)
	}
	// The nofence run expects no refusal; the weakened runs have their own
	// schedules.
	if f := FloorsFor(Options{Duration: time.Minute, Weaken: WeakenNoFence}); f[FloorStaleRefused] != 0 || f[floorFaultPrefix+FaultKillAll] != 0 {
		t.Fatalf("nofence floors: %v", f)
	}
	// porcupine's three answers.
	if d, vs := registerVerdict(porcupine.Unknown, 10, time.Second); d || len(vs) != 1 || vs[0].Checker != CheckerLinearizable {
		t.Fatalf("undecided: decided=%v %v", d, vs)
	}
	if d, vs := registerVerdict(porcupine.Illegal, 10, time.Second); !d || len(vs) != 1 {
		t.Fatalf("illegal: decided=%v %v", d, vs)
	}
	if d, vs := registerVerdict(porcupine.Ok, 10, time.Second); !d || len(vs) != 0 {
		t.Fatalf("ok: decided=%v %v", d, vs)
	}
}

// TestUnappliedFault: a partition whose rules a replica refuses is not
// counted as applied and fails the run; a cell whose /debug/faults does not
// answer cannot be run at all. It waits out the refused rules' retries
// (about 10 s of real time, no work), so it runs in parallel with the runs
// of real cells.
func TestUnappliedFault(t *testing.T) {
	t.Parallel()
	// Replica 1 is a real (sleeping) process whose HTTP listener says it is
	// master but refuses fault rules.
	mux := http.NewServeMux()
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(&api.CellStatusResponse{Replica: 1, Role: api.RoleMaster, Master: 1, Epoch: api.Epoch(3<<16 | 1)})
	})
	mux.HandleFunc("/debug/faults/rules", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusInternalServerError)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	sleeper, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	p, err := proccell.StartProcess(proccell.ProcessSpec{Name: "sleeper", Argv: []string{sleeper, "60"}, LogFile: t.TempDir() + "/log"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	c := &Cluster{Cell: proccell.Attach([]proccell.Attached{{Process: p, HTTPAddr: strings.TrimPrefix(srv.URL, "http://")}})}
	r := &run{log: slog.New(slog.DiscardHandler), rng: rand.New(rand.NewPCG(1, 2)), c: c, faults: map[string]int{}}
	applied, retry := r.try(context.Background(), FaultIsolateMaster, time.Millisecond)
	if applied || retry {
		t.Fatalf("refused rules: applied=%v retry=%v", applied, retry)
	}
	if r.faults[FaultIsolateMaster] != 0 || len(r.faultErrors) != 1 {
		t.Fatalf("refused rules counted: faults %v, errors %v", r.faults, r.faultErrors)
	}
	res := &Result{}
	res.Violations = faultViolations(r.faultErrors)
	if len(res.Violations) != 1 || res.Violations[0].Checker != CheckerFaults || res.OK() {
		t.Fatalf("violations: %v", res.Violations)
	}

	// No /debug/faults at all: the run cannot start.
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := r.checkFaultsAvailable(ctx); !errors.Is(err, ErrFaultsUnavailable) {
		t.Fatalf("faults unavailable: %v", err)
	}
}

// TestComputeStale: a zombie's stale write refused by the fenced store and
// taken by the unfenced register, which loses two increments.
func TestComputeStale(t *testing.T) {
	h := []Entry{
		{Type: TypeFail, Op: "fenced", Key: "counter-0", Value: "2 w1-5", Stale: true},
		{Type: TypeOK, Op: "fenced", Key: "counter-0", Value: "4 w0-9"},
	}
	fenced := []fencedkv.Record{
		rec(1, "counter-0", "1 w1-4", 1, 1, true), rec(2, "counter-0", "2 w0-7", 2, 1, true),
		rec(3, "counter-0", "3 w0-8", 3, 1, true), rec(4, "counter-0", "2 w1-5", 1, 1, false),
		rec(5, "counter-0", "4 w0-9", 4, 1, true),
	}
	open := []fencedkv.Record{
		rec(1, "counter-0", "1 w1-4", 1, 1, true), rec(2, "counter-0", "2 w0-7", 2, 1, true),
		rec(3, "counter-0", "3 w0-8", 3, 1, true), rec(4, "counter-0", "2 w1-5", 1, 1, true),
		rec(5, "counter-0", "3 w0-9", 4, 1, true),
	}
	got := ComputeStale(h, fenced, open)
	want := StaleReport{Attempted: 1, Refused: 1, OpenTaken: 1, OpenLostWrites: 1, OpenLostIncrements: 2}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestWeakenedVerdict: a weakened run passes only if the checker it
// targets fired; any other checker's violation does not count.
func TestWeakenedVerdict(t *testing.T) {
	for _, w := range Weakenings() {
		target := TargetChecker(w)
		if target == "" {
			t.Fatalf("%s has no target checker", w)
		}
		other := CheckerFloor
		caught := &Result{Weaken: w, Target: target, Violations: []Violation{{other, "x"}, {target, "y"}}}
		missed := &Result{Weaken: w, Target: target, Violations: []Violation{{other, "x"}}}
		if !caught.Passed() || missed.Passed() || missed.OK() {
			t.Fatalf("%s: caught passed=%v, missed passed=%v", w, caught.Passed(), missed.Passed())
		}
		if !strings.Contains(missed.Verdict(), "NOT DETECTED") {
			t.Fatalf("%s: %s", w, missed.Verdict())
		}
	}
	if normal := (&Result{}); !normal.Passed() || (&Result{Violations: []Violation{{CheckerFloor, "x"}}}).Passed() {
		t.Fatal("a normal run passes exactly without violations")
	}
}
