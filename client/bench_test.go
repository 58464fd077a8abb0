package client_test

import (
	"testing"
	"time"

	"github.com/lockcell/lockcell/client"
)

// BenchmarkMutexLockUnlock: one uncontended Lock+Unlock through a
// three-replica cell on loopback (two Paxos rounds).
func BenchmarkMutexLockUnlock(b *testing.B) {
	tc := startCell(b, 3, nil)
	ctx := testCtx(b, 5*time.Minute)
	s := tc.session(b, ctx, "bench")
	m := client.NewMutex(s, "/t/bench")
	b.ResetTimer()
	for b.Loop() {
		l, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetContents: one read of a small file (served by the master
// from its applied state, no Paxos round).
func BenchmarkGetContents(b *testing.B) {
	tc := startCell(b, 3, nil)
	ctx := testCtx(b, 5*time.Minute)
	s := tc.session(b, ctx, "bench")
	h, err := s.Open(ctx, "/t/read", client.OpenOptions{Create: true, Contents: []byte("x")})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := h.GetContents(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
