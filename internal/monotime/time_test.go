package monotime

import (
	"testing"
	"testing/quick"
	"testing/synctest"
	"time"
)

func TestArithmetic(t *testing.T) {
	// Add and Sub are inverse, and Before/After agree with Sub's sign, for
	// instants and durations that do not overflow.
	f := func(a int32, d int32) bool {
		t0 := Time(a) * 1000
		dd := time.Duration(d) * time.Microsecond
		t1 := t0.Add(dd)
		return t1.Sub(t0) == dd &&
			t1.After(t0) == (dd > 0) &&
			t1.Before(t0) == (dd < 0) &&
			t0.Add(-dd).Add(dd) == t0
	}
	if err := quick.Check(f, nil); err != nil {
		t.Error(err)
	}
}

func TestNowIsMonotonic(t *testing.T) {
	prev := Now()
	for range 1000 {
		n := Now()
		if n.Before(prev) {
			t.Fatalf("Now went back: %d after %d", n, prev)
		}
		prev = n
	}
}

func TestNowFollowsSynctestClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := Now()
		time.Sleep(12 * time.Second)
		if got := Now().Sub(start); got != 12*time.Second {
			t.Fatalf("after sleeping 12s on the fake clock, Now moved %v", got)
		}
	})
}
