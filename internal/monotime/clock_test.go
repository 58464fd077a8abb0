package monotime

import (
	"testing"
	"testing/synctest"
	"time"
)

func fired(tm Timer) bool {
	select {
	case <-tm.C():
		return true
	default:
		return false
	}
}

func TestRealTimerFiresAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := Real()
		start := c.Now()
		tm := c.NewTimer(3 * time.Second)
		<-tm.C()
		if got := c.Now().Sub(start); got != 3*time.Second {
			t.Fatalf("timer fired after %v, want 3s", got)
		}
	})
}

func TestRealTimerStopAndReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := Real()
		tm := c.NewTimer(time.Second)
		tm.Stop()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if fired(tm) {
			t.Fatal("stopped timer fired")
		}

		// A fire pending in the channel is discarded by Reset.
		tm.Reset(time.Second)
		time.Sleep(time.Second)
		synctest.Wait()
		start := c.Now()
		tm.Reset(5 * time.Second)
		if fired(tm) {
			t.Fatal("Reset kept the fire of the previous arming")
		}
		<-tm.C()
		if got := c.Now().Sub(start); got != 5*time.Second {
			t.Fatalf("reset timer fired after %v, want 5s", got)
		}
	})
}

func TestManualClock(t *testing.T) {
	m := NewManual(100)
	if m.Now() != 100 {
		t.Fatalf("Now = %d, want 100", m.Now())
	}
	a := m.NewTimer(2 * time.Second)
	b := m.NewTimer(time.Second)
	if m.Armed() != 2 {
		t.Fatalf("Armed = %d, want 2", m.Armed())
	}
	m.Advance(999 * time.Millisecond)
	if fired(a) || fired(b) {
		t.Fatal("timer fired before its deadline")
	}
	m.Advance(time.Millisecond)
	if fired(a) || !fired(b) {
		t.Fatal("at 1s only the 1s timer must fire")
	}
	if m.Armed() != 1 {
		t.Fatalf("Armed = %d after one fire, want 1", m.Armed())
	}
	a.Stop()
	m.Advance(time.Hour)
	if fired(a) {
		t.Fatal("stopped manual timer fired")
	}
	if got := m.Now().Sub(100); got != time.Hour+time.Second {
		t.Fatalf("clock moved %v, want 1h1s", got)
	}

	// A non-positive duration fires at once; Reset discards a pending fire.
	c := m.NewTimer(0)
	if !fired(c) {
		t.Fatal("zero-duration timer did not fire at once")
	}
	c.Reset(-time.Second)
	c.Reset(time.Second)
	if fired(c) {
		t.Fatal("Reset kept a pending fire")
	}
	m.Advance(time.Second)
	if !fired(c) {
		t.Fatal("re-armed manual timer did not fire")
	}
}

func TestManualAdvanceNegativePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Advance(-1) did not panic")
		}
	}()
	NewManual(0).Advance(-1)
}
