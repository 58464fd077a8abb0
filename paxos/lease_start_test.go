package paxos

import "testing"

// The master lease is counted from the ask, not from the answers.
//
// An acceptor's grant runs LeaseTicks ticks of its own clock from when it
// received the leader's Accept. The leader cannot know when that was; it
// knows only that it was no earlier than when it sent the Accept. So it
// counts each grant from the tick it sent the Accept (the Tick the acceptor
// echoes), never from when the Accepted arrives: a reply that spent a while
// in the network would otherwise stretch the leader's lease past the
// acceptors' grants, and a second master could be elected while the first
// still serves (Paxos Made Live §5.2; DESIGN.md invariant 3).
//
// The simulator finds a late-reply lease overlap only on rare seeds. This
// test builds the case by hand: three replicas whose tick counters differ
// (so an acceptor echoing its own clock is caught too), the replies to one
// heartbeat held back for a while and then delivered, and every later reply
// lost. The leader's lease must end exactly effTTL ticks after that
// heartbeat was sent, before the acceptors' grants run out.
func TestLeaseCountedFromTheAsk(t *testing.T) {
	const (
		lease = 20
		hold  = 8 // ticks the replies to one heartbeat spend in the network
	)
	tn := newTestNet(t, 3, func(c *Config) { c.LeaseTicks, c.HeartbeatTicks, c.ElectionTicks = lease, 5, 22 })
	l := tn.elect(300)
	tn.tick(3)
	eff := int(leaseEffective(lease, DefaultDriftPPM))
	if eff <= hold+1 || eff >= lease {
		t.Fatalf("effective lease %d does not suit the test (hold %d, lease %d)", eff, hold, lease)
	}

	// Skew the followers' tick counters far from the leader's: each one
	// ticks alone for a while between heartbeats (less than its election
	// timeout, so nobody campaigns).
	for round := 0; round < 8; round++ {
		for _, r := range tn.reps {
			if r != l {
				tn.tickOne(r.id, 10+int(r.id))
			}
		}
		tn.tick(5)
	}
	lt := l.node.Status().Ticks
	for _, r := range tn.reps {
		if ft := r.node.Status().Ticks; r != l && (ft < lt+3*lease && lt < ft+3*lease) {
			t.Fatalf("follower %d's tick count %d is too close to the leader's %d", r.id, ft, lt)
		}
	}
	if !l.node.Status().Master {
		t.Fatal("the leader lost its lease while the followers' clocks were skewed")
	}

	// From now on the leader hears no Accepted: the replies to the next
	// heartbeat are held back, every later one is lost.
	var held []Message
	var sent uint64
	tn.drop = func(m Message) bool {
		if m.To != l.id || m.Type != MsgAccepted {
			return false
		}
		if len(held) == 0 || m.Tick == sent {
			sent = m.Tick
			held = append(held, m)
		}
		return true
	}
	for i := 0; len(held) < 2; i++ {
		if i > 10 {
			t.Fatal("no heartbeat answered within 10 ticks")
		}
		tn.tick(1)
	}
	if now := l.node.Status().Ticks; sent == 0 || sent > now || sent+uint64(5) < now {
		t.Fatalf("the held replies echo tick %d; the leader is at tick %d", sent, now)
	}
	for l.node.Status().Ticks < sent+hold {
		tn.tick(1)
	}
	if !l.node.Status().Master {
		t.Fatal("the leader's earlier grants did not carry it to the delivery")
	}

	// Deliver the held replies, hold ticks late.
	for _, m := range held {
		if err := l.node.Step(m); err != nil {
			t.Fatal(err)
		}
	}
	tn.deliver()
	st := l.node.Status()
	wantEnd := sent + uint64(eff)
	if got := st.Ticks + uint64(st.LeaseTicksLeft); !st.Master || got != wantEnd {
		t.Fatalf("after the late replies (sent at tick %d, delivered at %d) the lease ends at tick %d (master %v); "+
			"want %d: counted from the ask, not the arrival", sent, st.Ticks, got, st.Master, wantEnd)
	}

	// The leader stops being master at that tick, while every grant the
	// acceptors made on that heartbeat is still running: they received it
	// at tick `sent` of the leader's clock and hold it for lease ticks.
	for {
		tn.tick(1)
		st := l.node.Status()
		if !st.Master {
			if st.Ticks != wantEnd {
				t.Fatalf("the leader stopped being master at tick %d; want %d", st.Ticks, wantEnd)
			}
			break
		}
		if st.Ticks >= sent+lease {
			t.Fatalf("tick %d: the leader is master although the acceptors' grants from tick %d ran out at %d",
				st.Ticks, sent, sent+lease)
		}
	}
	t.Logf("heartbeat sent at tick %d, replies delivered %d ticks late; lease ended at tick %d, %d ticks before the grants",
		sent, hold, wantEnd, sent+lease-wantEnd)
}
