package transport

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestPeerRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1, 2)
		s.startAll(nil)
		defer s.closeAll()
		if err := s.eps[1].Send(2, 7, testMsg{Seq: 1, Data: []byte("hello")}); err != nil {
			t.Fatal(err)
		}
		m := recvOne(t, s.eps[2], 5*time.Second)
		var got testMsg
		if err := m.Decode(&got); err != nil {
			t.Fatal(err)
		}
		if m.From != 1 || m.Tag != 7 || got.Seq != 1 || string(got.Data) != "hello" {
			t.Fatalf("got %+v %+v", m, got)
		}
		if err := s.eps[2].Send(1, 8, testMsg{Seq: 2}); err != nil {
			t.Fatal(err)
		}
		m = recvOne(t, s.eps[1], 5*time.Second)
		if m.From != 2 || m.Tag != 8 {
			t.Fatalf("got %+v", m)
		}
		st := s.eps[1].Stats()
		if st.PeerFramesSent != 1 || st.PeerFramesReceived != 1 || st.PeerBytesSent == 0 {
			t.Fatalf("stats %+v", st)
		}
		if len(st.Peers) != 1 || st.Peers[0].ID != 2 || !st.Peers[0].Connected || st.Peers[0].Sent != 1 {
			t.Fatalf("peer stats %+v", st.Peers)
		}
	})
}

// TestPeerOrdering: two senders interleave many messages of mixed sizes to
// one receiver; each sender's messages arrive complete and in order.
func TestPeerOrdering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1, 2, 3)
		s.startAll(nil)
		defer s.closeAll()
		const n = 3000
		done := make(chan error, 2)
		for _, from := range []uint64{1, 3} {
			go func() {
				for i := range n {
					var data []byte
					if i%50 == 0 {
						data = make([]byte, 20000+i) // spans several QUIC packets
					}
					if err := s.eps[from].Send(2, uint16(from), testMsg{Seq: i, Data: data}); err != nil {
						done <- err
						return
					}
					if i%100 == 0 {
						time.Sleep(time.Millisecond) // let the queue drain now and then
					}
				}
				done <- nil
			}()
		}
		next := map[uint64]int{1: 0, 3: 0}
		for got := 0; got < 2*n; got++ {
			m := recvOne(t, s.eps[2], 10*time.Second)
			var tm testMsg
			if err := m.Decode(&tm); err != nil {
				t.Fatal(err)
			}
			if uint64(m.Tag) != m.From {
				t.Fatalf("message from %d carries tag %d", m.From, m.Tag)
			}
			if tm.Seq != next[m.From] {
				t.Fatalf("from %d: got seq %d, want %d", m.From, tm.Seq, next[m.From])
			}
			next[m.From]++
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if st := s.eps[1].Stats(); st.DropsQueueFull+st.DropsDisconnected+st.DropsFault != 0 {
			t.Fatalf("unexpected drops: %+v", st)
		}
	})
}

func TestPeerQueueDropsOldest(t *testing.T) {
	e := &Endpoint{cfg: Config{PeerQueueLen: 4, PeerQueueBytes: 1 << 20}}
	p := newPeer(e, 2, "x")
	for i := range 6 {
		p.enqueue([]byte{byte(i)}, verdict{})
	}
	batch, wait := p.takeBatch(nil, time.Now())
	if wait != 0 || len(batch) != 4 {
		t.Fatalf("batch of %d, wait %v", len(batch), wait)
	}
	for i, m := range batch {
		if m.frame[0] != byte(i+2) {
			t.Fatalf("batch[%d] = %d, want %d (the two oldest dropped)", i, m.frame[0], i+2)
		}
	}
	if e.stats.dropsQueueFull.Load() != 2 || p.dropped.Load() != 2 {
		t.Fatalf("drops %d/%d, want 2", e.stats.dropsQueueFull.Load(), p.dropped.Load())
	}
	// A delayed head holds back the messages behind it.
	now := time.Now()
	p.enqueue([]byte{10}, verdict{delay: time.Second})
	p.enqueue([]byte{11}, verdict{})
	if batch, wait = p.takeBatch(batch[:0], now); len(batch) != 0 || wait <= 0 {
		t.Fatalf("delayed head: batch %d wait %v", len(batch), wait)
	}
	if batch, _ = p.takeBatch(batch[:0], now.Add(2*time.Second)); len(batch) != 2 || batch[0].frame[0] != 10 {
		t.Fatalf("after the delay: %v", batch)
	}
	// The byte bound drops the oldest too: 10 bytes hold two 4-byte frames.
	e.cfg.PeerQueueBytes = 10
	for i := range 5 {
		p.enqueue([]byte{byte(i), 0, 0, 0}, verdict{})
	}
	if batch, _ = p.takeBatch(batch[:0], now); len(batch) != 2 || batch[0].frame[0] != 3 || batch[1].frame[0] != 4 {
		t.Fatalf("byte bound: %d frames, first %v", len(batch), batch)
	}
	if p.queued() != 0 || p.mu.bytes != 0 {
		t.Fatalf("queue not empty: %d, %d bytes", p.queued(), p.mu.bytes)
	}
}

func TestSendErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1, 2)
		e := s.start(1, func(c *Config) { c.MaxPeerFrame = 1000 })
		if err := e.Send(9, 1, testMsg{}); !errors.Is(err, ErrUnknownPeer) {
			t.Fatalf("unknown peer: %v", err)
		}
		if err := e.Send(1, 1, testMsg{}); !errors.Is(err, ErrUnknownPeer) {
			t.Fatalf("send to self: %v", err)
		}
		if err := e.Send(2, 1, make(chan int)); !errors.Is(err, ErrEncode) {
			t.Fatalf("unencodable: %v", err)
		}
		if err := e.Send(2, 1, testMsg{Data: make([]byte, 1001)}); !errors.Is(err, ErrEncode) {
			t.Fatalf("too large: %v", err)
		}
		if q := e.Stats().Peers[0].Queued; q != 0 {
			t.Fatalf("refused messages were queued: %d", q)
		}
		e.Close()
		if err := e.Send(2, 1, testMsg{}); !errors.Is(err, ErrClosed) {
			t.Fatalf("after close: %v", err)
		}
		if _, ok := <-e.Recv(); ok {
			t.Fatal("Recv not closed")
		}
	})
}

// TestPeerReconnectAfterRestart: the receiver restarts, first cleanly and
// then abruptly (its address goes silent, so only the idle timeout tells
// the sender); each time the sender redials and delivery resumes.
func TestPeerReconnectAfterRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1, 2)
		s.startAll(nil)
		defer s.closeAll()
		a := s.eps[1]
		send := func(seq int) {
			if err := a.Send(2, 1, testMsg{Seq: seq}); err != nil {
				t.Fatal(err)
			}
		}
		send(1)
		recvOne(t, s.eps[2], time.Second)

		// Clean restart: replica 2 closes and comes back on the same address.
		s.eps[2].Close()
		synctest.Wait()
		b := s.start(2, nil)
		send(2)
		m := recvOne(t, b, 10*time.Second)
		var tm testMsg
		_ = m.Decode(&tm)
		if tm.Seq != 2 {
			t.Fatalf("after restart got seq %d", tm.Seq)
		}
		if r := a.Stats().Reconnects; r < 1 {
			t.Fatalf("Reconnects = %d", r)
		}

		// Crash: the host goes silent, then a new process starts. The old
		// connection dies by idle timeout, and messages sent meanwhile wait
		// in the queue (or are lost with the dead connection).
		if err := s.net.Block(simAddr(2), true); err != nil {
			t.Fatal(err)
		}
		b.Close()
		synctest.Wait()
		s.net.Block(simAddr(2), false)
		b = s.start(2, nil)
		start := time.Now()
		for i := 3; ; i++ {
			send(i)
			select {
			case <-b.Recv():
				if took := time.Since(start); took > DefaultPeerIdleTimeout+DefaultReconnectMax+time.Second {
					t.Fatalf("reconnect took %v", took)
				}
				return
			case <-time.After(500 * time.Millisecond):
			}
			if time.Since(start) > time.Minute {
				t.Fatal("no delivery a minute after the crash")
			}
		}
	})
}

// TestBlockedPeerDoesNotStallOthers: replica 2 never reads its Recv
// channel, so its stream backs up; replica 4 is down. Sends from replica 1
// never block, replica 3 receives everything, and replica 2's queue drops
// its oldest messages.
func TestBlockedPeerDoesNotStallOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1, 2, 3, 4)
		s.start(1, func(c *Config) { c.PeerQueueLen = 64 })
		s.start(2, func(c *Config) { c.RecvQueueLen = 1 })
		s.start(3, nil)
		defer s.closeAll()
		a, c := s.eps[1], s.eps[3]
		payload := make([]byte, 64<<10)
		const n = 500
		// Each round sends to every peer, then waits for the healthy one to
		// receive its copy: if a send to the blocked or dead peer blocked,
		// or their backlog slowed the healthy stream, the round would stall.
		for i := range n {
			for _, to := range []uint64{2, 4, 3} {
				if err := a.Send(to, 1, testMsg{Seq: i, Data: payload}); err != nil {
					t.Fatal(err)
				}
			}
			var tm testMsg
			if err := recvOne(t, c, 10*time.Second).Decode(&tm); err != nil || tm.Seq != i {
				t.Fatalf("replica 3 got seq %d (%v), want %d", tm.Seq, err, i)
			}
		}
		st := a.Stats()
		by := map[uint64]PeerStats{}
		for _, p := range st.Peers {
			by[p.ID] = p
		}
		if by[2].Dropped == 0 || by[4].Dropped == 0 {
			t.Fatalf("no drops towards the blocked or dead peer: %+v", st.Peers)
		}
		if by[3].Dropped != 0 {
			t.Fatalf("drops towards the healthy peer: %+v", by[3])
		}
		if st.DropsQueueFull < by[2].Dropped {
			t.Fatalf("DropsQueueFull %d < peer 2 drops %d", st.DropsQueueFull, by[2].Dropped)
		}
	})
}

// TestPartitionAndHeal: partitions cut exactly the pairs they name, in the
// directions they name, and healing restores delivery.
func TestPartitionAndHeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1, 2, 3)
		s.startAll(nil)
		defer s.closeAll()
		send := func(from, to uint64, seq int) {
			t.Helper()
			if err := s.eps[from].Send(to, 1, testMsg{Seq: seq}); err != nil {
				t.Fatal(err)
			}
		}
		s.faults.Partition(1, 2)
		send(1, 2, 1)
		send(2, 1, 2)
		send(1, 3, 3)
		send(3, 2, 4)
		if m := recvOne(t, s.eps[3], time.Second); m.From != 1 {
			t.Fatalf("3 got from %d", m.From)
		}
		if m := recvOne(t, s.eps[2], time.Second); m.From != 3 {
			t.Fatalf("2 got from %d", m.From)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		noMessage(t, s.eps[2])
		noMessage(t, s.eps[1])

		s.faults.Heal()
		s.faults.PartitionOneWay(1, 2)
		send(1, 2, 5)
		send(2, 1, 6)
		if m := recvOne(t, s.eps[1], time.Second); m.From != 2 {
			t.Fatalf("1 got from %d", m.From)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		noMessage(t, s.eps[2])

		s.faults.Heal()
		send(1, 2, 7)
		m := recvOne(t, s.eps[2], time.Second)
		var tm testMsg
		_ = m.Decode(&tm)
		if m.From != 1 || tm.Seq != 7 {
			t.Fatalf("after heal: from %d seq %d", m.From, tm.Seq)
		}
		if d := s.eps[1].Stats().DropsFault; d != 2 {
			t.Fatalf("replica 1 DropsFault = %d, want 2", d)
		}
	})
}

// TestPartitionEnforcedByReceiver: with one Faults per replica (as in a
// multi-process cell), isolating replica 2 in its own Faults cuts both
// directions: its sends are dropped on its send path and other replicas'
// messages on its receive path.
func TestPartitionEnforcedByReceiver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1, 2)
		own := map[uint64]*Faults{1: NewFaults(1), 2: NewFaults(2)}
		for _, id := range []uint64{1, 2} {
			s.start(id, func(c *Config) { c.Faults = own[id] })
		}
		defer s.closeAll()
		own[2].Isolate(2)
		_ = s.eps[1].Send(2, 1, testMsg{Seq: 1})
		_ = s.eps[2].Send(1, 1, testMsg{Seq: 2})
		time.Sleep(2 * time.Second)
		synctest.Wait()
		noMessage(t, s.eps[1])
		noMessage(t, s.eps[2])
		if st := s.eps[2].Stats(); st.DropsFault != 2 || st.PeerFramesReceived != 1 {
			t.Fatalf("replica 2 stats: DropsFault %d PeerFramesReceived %d", st.DropsFault, st.PeerFramesReceived)
		}
		own[2].Heal()
		_ = s.eps[1].Send(2, 1, testMsg{Seq: 3})
		recvOne(t, s.eps[2], time.Second)
	})
}

// TestFaultsDropDuplicateDelay checks the probabilistic and timing faults.
func TestFaultsDropDuplicateDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1, 2)
		s.startAll(nil)
		defer s.closeAll()
		a, b := s.eps[1], s.eps[2]
		read := func(n int) []int {
			var seqs []int
			for range n {
				var tm testMsg
				_ = recvOne(t, b, 5*time.Second).Decode(&tm)
				seqs = append(seqs, tm.Seq)
			}
			return seqs
		}
		// Warm the connection up so timings below exclude the handshake.
		_ = a.Send(2, 1, testMsg{})
		read(1)

		if err := s.faults.AddRule(Rule{From: 1, To: 2, Duplicate: 1}); err != nil {
			t.Fatal(err)
		}
		_ = a.Send(2, 1, testMsg{Seq: 1})
		_ = a.Send(2, 1, testMsg{Seq: 2})
		if got := read(4); !equalInts(got, []int{1, 1, 2, 2}) {
			t.Fatalf("duplicates: %v", got)
		}

		s.faults.Heal()
		if err := s.faults.AddRule(Rule{From: 1, To: 2, Delay: 300 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_ = a.Send(2, 1, testMsg{Seq: 3})
		s.faults.Heal() // a later, undelayed message must not overtake
		_ = a.Send(2, 1, testMsg{Seq: 4})
		got := read(2)
		if took := time.Since(start); took < 300*time.Millisecond {
			t.Fatalf("delayed message arrived after %v", took)
		}
		if !equalInts(got, []int{3, 4}) {
			t.Fatalf("delay reordered: %v", got)
		}

		if err := s.faults.Set(FaultState{Rules: []Rule{{From: 1, Drop: 0.5}}}); err != nil {
			t.Fatal(err)
		}
		const n = 400
		for i := range n {
			_ = a.Send(2, 1, testMsg{Seq: 100 + i})
		}
		dropped := a.Stats().DropsFault
		if dropped < n/4 || dropped > 3*n/4 {
			t.Fatalf("Drop 0.5 dropped %d of %d", dropped, n)
		}
		arrived := read(n - int(dropped))
		for i := 1; i < len(arrived); i++ {
			if arrived[i] <= arrived[i-1] {
				t.Fatalf("order broken by drops: %v", arrived)
			}
		}
		time.Sleep(time.Second)
		synctest.Wait()
		noMessage(t, b)
	})
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPeerBadFrameClosesConnection: a peer (with a valid certificate) that
// sends garbage loses its connection; the receiver counts it and keeps
// serving other peers, and the peer can connect again.
func TestPeerBadFrameClosesConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  []byte
		want error
	}{
		{"oversize", []byte{0x04, 0x00, 0x00, 0x01, 0, 1}, ErrFrameTooLarge},
		{"garbage", []byte{0, 0, 0, 2, 0, 1, 0xc1, 0xc1}, ErrMalformedFrame},
		{"truncated", []byte{0, 0, 0, 9, 0, 1, 0x92}, ErrTruncatedFrame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t, 1, 2, 3)
				s.start(1, func(c *Config) { c.MaxPeerFrame = 1 << 20 })
				s.start(3, nil)
				defer s.closeAll()
				a := s.eps[1]
				conn := rawDial(t, s, "10.0.0.99:4000", simAddr(1), ALPNPeer, s.replicaCert(2), nil)
				st, err := conn.OpenStreamSync(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				good, _ := AppendFrame(nil, 1, testMsg{Seq: 42}, 0)
				if _, err := st.Write(append(good, tc.raw...)); err != nil {
					t.Fatal(err)
				}
				if tc.name == "truncated" {
					st.Close()
				}
				m := recvOne(t, a, time.Second)
				if m.From != 2 {
					t.Fatalf("first message from %d", m.From)
				}
				select {
				case <-conn.Context().Done():
				case <-time.After(5 * time.Second):
					t.Fatal("bad peer connection not closed")
				}
				if cause := context.Cause(conn.Context()); !strings.Contains(cause.Error(), tc.want.Error()) {
					t.Fatalf("close reason %q does not mention %q", cause, tc.want)
				}
				if n := a.Stats().BadFrames; n != 1 {
					t.Fatalf("BadFrames = %d", n)
				}
				// Other peers are unaffected.
				_ = s.eps[3].Send(1, 1, testMsg{Seq: 1})
				if m := recvOne(t, a, time.Second); m.From != 3 {
					t.Fatalf("got from %d", m.From)
				}
				// The real replica 2 can connect (a new connection is accepted).
				b := s.start(2, nil)
				_ = b.Send(1, 1, testMsg{Seq: 2})
				if m := recvOne(t, a, 10*time.Second); m.From != 2 {
					t.Fatalf("got from %d", m.From)
				}
			})
		})
	}
}
