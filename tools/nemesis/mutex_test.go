package nemesis

import (
	"strings"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

func mkHold(w int, lock string, gen uint64, start, end int64, intact bool) Hold {
	h := Hold{Worker: w, Session: uint64(100 + w), Lock: lock, Gen: gen, Start: start * ms, End: end * ms, Intact: intact}
	if !intact {
		h.Cause = "client: session in jeopardy"
	}
	return h
}

// TestCheckMutex feeds the mutual-exclusion checker hand-made histories: a
// clean one, and one per kind of violation, each of which must be found
// (and nothing else).
func TestCheckMutex(t *testing.T) {
	lease := 3 * time.Second
	// Worker 0 holds lock a twice; worker 1 holds it in between; worker 2 is
	// a zombie stopped for 4 s inside its hold, which it ends lost; worker
	// 1 holds lock b while worker 0 holds a (other locks may overlap).
	clean := []Hold{
		mkHold(0, "a", 1, 0, 100, true),
		mkHold(1, "a", 2, 110, 200, true),
		mkHold(2, "a", 3, 210, 5000, false), // the zombie
		mkHold(0, "a", 4, 4500, 4600, true), // granted while the zombie slept
		mkHold(1, "b", 5, 4550, 4700, true),
	}
	pauses := []Pause{{Worker: 2, Stop: 300 * ms, Cont: 4999 * ms}, {Worker: 0, Stop: 6000 * ms, Cont: 9000 * ms}}
	rep, vs := CheckMutex(clean, pauses, lease)
	if len(vs) != 0 {
		t.Fatalf("clean history: %v", vs)
	}
	if rep.Holds != 5 || rep.Intact != 4 || len(rep.Zombies) != 1 || rep.Zombies[0].Worker != 2 || rep.Zombies[0].LookAfter != time.Millisecond {
		t.Fatalf("clean history's report: %+v", rep)
	}

	cases := []struct {
		name  string
		holds []Hold
		want  string
	}{
		// The zombie resumes believing it holds the lock: its hold and the
		// one granted during its pause are both intact and overlap.
		{"zombie intact", replace(clean, 2, mkHold(2, "a", 3, 210, 5000, true)), "zombie worker 2"},
		// Two ordinary holds overlap by 5 ms.
		{"overlap", replace(clean, 1, mkHold(1, "a", 2, 95, 200, true)), "intact holds overlap"},
		// A later hold overlaps an earlier one that is not the hold just
		// before it: worker 5's long hold reaches past worker 6's.
		{"overlap far", []Hold{mkHold(5, "c", 10, 0, 1000, true), mkHold(6, "c", 11, 10, 20, true), mkHold(7, "c", 12, 500, 600, true)}, "worker 5 (generation 10) and worker 7"},
		// The same generation granted to two holders.
		{"granted twice", replace(clean, 3, mkHold(0, "a", 2, 4500, 4600, true)), "granted twice"},
		// Generations out of the order of the holds.
		{"backwards", replace(clean, 1, mkHold(1, "a", 0, 110, 200, true)), "went backwards"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, vs := CheckMutex(c.holds, pauses, lease)
			if len(vs) == 0 {
				t.Fatalf("not caught")
			}
			found := false
			for _, v := range vs {
				if v.Checker != CheckerMutex {
					t.Errorf("violation of another checker: %v", v)
				}
				found = found || strings.Contains(v.Text, c.want)
			}
			if !found {
				t.Fatalf("want a violation saying %q, got %v", c.want, vs)
			}
		})
	}

	// A session that acquires again while it still holds the grant (its
	// Release was lost) gets the same generation back: no second grant.
	again := append(append([]Hold(nil), clean...), mkHold(1, "b", 5, 4800, 4900, true))
	if _, vs := CheckMutex(again, pauses, lease); len(vs) != 0 {
		t.Fatalf("same grant held again by its session: %v", vs)
	}
	// The same generation in another session of that worker is a second
	// grant.
	other := mkHold(1, "b", 5, 4800, 4900, true)
	other.Session = 999
	if _, vs := CheckMutex(append(append([]Hold(nil), clean...), other), pauses, lease); len(vs) == 0 {
		t.Fatal("a generation granted to two sessions of one worker not caught")
	}

	// A pause shorter than the lease makes no zombie: a holder may resume
	// with its lock intact.
	short := replace(clean, 2, mkHold(2, "a", 3, 210, 4400, true))
	if rep, vs := CheckMutex(short, []Pause{{Worker: 2, Stop: 300 * ms, Cont: 3200 * ms}}, lease); len(vs) != 0 || len(rep.Zombies) != 0 {
		t.Fatalf("pause within the lease: %v %+v", vs, rep)
	}
}

func replace(hs []Hold, i int, h Hold) []Hold {
	out := append([]Hold(nil), hs...)
	out[i] = h
	return out
}

// TestHoldsAndPauses reads holds and pauses back from history entries as
// workers and the nemesis write them.
func TestHoldsAndPauses(t *testing.T) {
	h := []Entry{
		{Type: TypeHold, Worker: 1, Key: "/nem/lock-0", Gen: 7, Start: 10, End: 20, Intact: true},
		{Type: TypeHold, Worker: 2, Key: "/nem/lock-0", Gen: 8, Start: 30, End: 40, Err: "lost"},
		{Type: TypeStopped, Source: "nemesis", Worker: 2, Start: 31, End: 39},
		{Type: TypeOK, Op: "fenced", Worker: 1},
	}
	hs, ps := HoldsAndPauses(h)
	if len(hs) != 2 || !hs[0].Intact || hs[1].Intact || hs[1].Cause != "lost" || hs[1].Gen != 8 {
		t.Fatalf("holds: %+v", hs)
	}
	if len(ps) != 1 || ps[0] != (Pause{Worker: 2, Stop: 31, Cont: 39}) {
		t.Fatalf("pauses: %+v", ps)
	}
}
