package cell

import (
	"testing"
	"time"
)

func TestLeaseExtensionFor(t *testing.T) {
	const max = 12 * time.Second
	for _, tc := range []struct {
		queued, capacity int
		cur, want        time.Duration
	}{
		{0, 100, 0, 0},
		{51, 100, 0, max},   // over half: extend
		{30, 100, max, max}, // in between: keep
		{30, 100, 0, 0},     // in between: keep
		{9, 100, max, 0},    // under a tenth: back to none
		{100, 100, 0, max},  // full
		{100, 100, 0, max},  // full
		{50, 0, max, 0},     // no queue: nothing to judge
	} {
		if got := leaseExtensionFor(tc.queued, tc.capacity, tc.cur, max); got != tc.want {
			t.Errorf("leaseExtensionFor(%d, %d, %v) = %v, want %v", tc.queued, tc.capacity, tc.cur, got, tc.want)
		}
	}
	if got := leaseExtensionFor(100, 100, 0, 0); got != 0 {
		t.Errorf("with no room for extension got %v", got)
	}
}
