package transport

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// TestSetPeers follows a cell's membership: replica 3 joins 1 and 2 (it is
// heard only once added), then 2 is removed: from then on 1 refuses its
// frames and handshakes while still sending to it, and 2's messages never
// arrive.
func TestSetPeers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1, 2, 3)
		for _, id := range []uint64{1, 2} {
			s.start(id, func(c *Config) { delete(c.Peers, 3) })
		}
		s.start(3, nil)
		defer s.closeAll()
		ctx := context.Background()
		e1, e2, e3 := s.eps[1], s.eps[2], s.eps[3]

		// 3 is not yet a peer of 1: its handshakes are refused.
		if err := e3.Send(1, 9, testMsg{Seq: 1}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		noMessage(t, e1)
		if got := e1.Stats().RefusedNotPeer; got == 0 {
			t.Fatalf("replica 1 refused no handshake of replica 3 (stats %+v)", e1.Stats())
		}
		if err := e1.Send(3, 9, testMsg{}); !errors.Is(err, ErrUnknownPeer) {
			t.Fatalf("Send to a replica outside the peer set: %v, want ErrUnknownPeer", err)
		}

		// 3 is added: it is dialled and heard.
		all := s.peers()
		if err := e1.SetPeers(ctx, all, nil); err != nil {
			t.Fatal(err)
		}
		if got := e1.Peers(); !slices.Equal(got, []uint64{2, 3}) {
			t.Fatalf("Peers() = %v, want [2 3]", got)
		}
		if err := e3.Send(1, 9, testMsg{Seq: 2}); err != nil {
			t.Fatal(err)
		}
		if m := recvOne(t, e1, 10*time.Second); m.From != 3 {
			t.Fatalf("message from %d, want 3", m.From)
		}
		if err := e1.Send(3, 9, testMsg{Seq: 3}); err != nil {
			t.Fatal(err)
		}
		if m := recvOne(t, e3, 10*time.Second); m.From != 1 {
			t.Fatalf("message from %d, want 1", m.From)
		}
		// 2 is connected to 1 before its removal.
		if err := e2.Send(1, 9, testMsg{Seq: 4}); err != nil {
			t.Fatal(err)
		}
		if m := recvOne(t, e1, 10*time.Second); m.From != 2 {
			t.Fatalf("message from %d, want 2", m.From)
		}

		// 2 is removed, but 1 still sends to it.
		refused := e1.Stats().RefusedNotPeer
		if err := e1.SetPeers(ctx, map[uint64]string{1: all[1], 3: all[3]}, map[uint64]string{2: all[2]}); err != nil {
			t.Fatal(err)
		}
		if got := e1.Peers(); !slices.Equal(got, []uint64{3}) {
			t.Fatalf("Peers() = %v, want [3]", got)
		}
		for i := range 5 {
			if err := e2.Send(1, 9, testMsg{Seq: 10 + i}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
		}
		noMessage(t, e1)
		if got := e1.Stats().RefusedNotPeer; got <= refused {
			t.Fatalf("replica 1 refused nothing of removed replica 2 (RefusedNotPeer %d, before %d)", got, refused)
		}
		if err := e1.Send(2, 9, testMsg{Seq: 20}); err != nil {
			t.Fatal(err)
		}
		if m := recvOne(t, e2, 10*time.Second); m.From != 1 {
			t.Fatalf("message from %d, want 1", m.From)
		}

		// Bad input changes nothing.
		if err := e1.SetPeers(ctx, map[uint64]string{3: "not an address"}, nil); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("SetPeers with a bad address: %v, want ErrInvalidConfig", err)
		}
		if got := e1.Peers(); !slices.Equal(got, []uint64{3}) {
			t.Fatalf("Peers() after a refused SetPeers = %v, want [3]", got)
		}
	})
}
