package nemesis

import (
	"fmt"
	"math"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/lockcell/lockcell/sequencer"
	"github.com/lockcell/lockcell/tools/fencedkv"
)

func rec(seq uint64, key, value string, gen, inst uint64, ok bool) fencedkv.Record {
	return fencedkv.Record{Seq: seq, Key: key, Value: []byte(value), Accepted: ok,
		Sequencer: sequencer.Sequencer{Cell: "c", Path: "/nem/lock-0", Generation: gen, Instance: inst}}
}

func checkers(vs []Violation) map[string]int {
	m := map[string]int{}
	for _, v := range vs {
		m[v.Checker]++
	}
	return m
}

func TestCheckResource(t *testing.T) {
	lockOf := lockOfKey("/nem")
	good := []fencedkv.Record{
		rec(1, "claim-0", "a", 1, 1, true), rec(2, "counter-0", "1 a", 1, 1, true),
		rec(3, "claim-0", "b", 2, 1, true), rec(4, "counter-0", "2 b", 2, 1, true),
		rec(5, "counter-0", "2 z", 1, 1, false), // a zombie, rejected: fine
		rec(6, "claim-0", "c", 3, 1, true), rec(7, "counter-0", "3 c", 3, 1, true),
	}
	if vs := CheckResource(good, lockOf); len(vs) != 0 {
		t.Fatalf("good records: %v", vs)
	}
	// The zombie's write accepted (what a resource without fencing does):
	// every resource checker sees it.
	bad := append([]fencedkv.Record(nil), good...)
	bad[4].Accepted = true
	got := checkers(CheckResource(bad, lockOf))
	for _, c := range []string{CheckerFencing, CheckerInterleaving, CheckerLostUpdate} {
		if got[c] == 0 {
			t.Errorf("accepted zombie write: %s did not fire (%v)", c, got)
		}
	}
	// A lost update without any fencing problem: two writes of the same
	// value by successive holders.
	lost := []fencedkv.Record{rec(1, "counter-0", "1 a", 1, 1, true), rec(2, "counter-0", "1 b", 2, 1, true)}
	if got := checkers(CheckResource(lost, lockOf)); got[CheckerLostUpdate] != 1 || got[CheckerFencing] != 0 {
		t.Errorf("lost update: %v", got)
	}
}

func TestCheckAckSet(t *testing.T) {
	h := []Entry{
		{Type: TypeInvoke, Op: "create", Key: "/nem/ack/a", ID: 1},
		{Type: TypeOK, Op: "create", Key: "/nem/ack/a", ID: 1},
		{Type: TypeInvoke, Op: "create", Key: "/nem/ack/b", ID: 2},
		{Type: TypeInfo, Op: "create", Key: "/nem/ack/b", ID: 2},
	}
	if n, vs := CheckAckSet(h, map[string]bool{"/nem/ack/a": true}); n != 1 || len(vs) != 0 {
		t.Fatalf("present: %d %v", n, vs)
	}
	if _, vs := CheckAckSet(h, map[string]bool{"/nem/ack/b": true}); len(vs) != 1 {
		t.Fatalf("acked create missing but not reported: %v", vs)
	}
}

func op(w int, id uint64, typ, o, key, v string, gen uint64, t int64) Entry {
	return Entry{Worker: w, ID: id, Type: typ, Op: o, Key: key, Value: v, Gen: gen, Time: t}
}

func TestCheckRegisters(t *testing.T) {
	ok := []Entry{
		op(0, 1, TypeInvoke, "set", "r", "x", 0, 10), op(0, 1, TypeOK, "set", "r", "x", 2, 20),
		op(1, 1, TypeInvoke, "get", "r", "", 0, 30), op(1, 1, TypeOK, "get", "r", "x", 2, 40),
		op(0, 2, TypeInvoke, "cas", "r", "y", 2, 50), op(0, 2, TypeOK, "cas", "r", "y", 3, 60),
		op(1, 2, TypeInvoke, "cas", "r", "z", 2, 70), op(1, 2, TypeFail, "cas", "r", "z", 2, 80),
		// An unknown set may take effect later: the read of "w" is fine.
		op(0, 3, TypeInvoke, "set", "r", "w", 0, 90), op(0, 3, TypeInfo, "set", "r", "w", 0, 100),
		op(1, 3, TypeInvoke, "get", "r", "", 0, 110), op(1, 3, TypeOK, "get", "r", "w", 4, 120),
	}
	if _, decided, vs := CheckRegisters(ok, 10e9); !decided || len(vs) != 0 {
		t.Fatalf("linearizable history: decided=%v %v", decided, vs)
	}
	// A stale read after the cas completed (what an old master serving
	// after a new one took over would return).
	stale := append(append([]Entry(nil), ok[:6]...),
		op(1, 9, TypeInvoke, "get", "r", "", 0, 65), op(1, 9, TypeOK, "get", "r", "x", 2, 66))
	if _, decided, vs := CheckRegisters(stale, 10e9); !decided || len(vs) != 1 {
		t.Fatalf("stale read not caught: decided=%v %v", decided, vs)
	}
	// The right contents at the wrong generation: a write was applied
	// twice, or the read came from another state.
	gen := append(append([]Entry(nil), ok[:2]...),
		op(1, 9, TypeInvoke, "get", "r", "", 0, 25), op(1, 9, TypeOK, "get", "r", "x", 3, 26))
	if _, _, vs := CheckRegisters(gen, 10e9); len(vs) != 1 {
		t.Fatalf("read at a wrong generation not caught: %v", vs)
	}
	// An acknowledged cas that did not apply.
	lost := append(append([]Entry(nil), ok[:6]...),
		op(1, 9, TypeInvoke, "get", "r", "", 0, 65), op(1, 9, TypeOK, "get", "r", "x", 3, 66))
	if _, _, vs := CheckRegisters(lost, 10e9); len(vs) != 1 {
		t.Fatalf("wrong generation not caught: %v", vs)
	}
}

func TestRegisterOperationsUnknown(t *testing.T) {
	h := []Entry{op(0, 1, TypeInvoke, "set", "r", "x", 0, 10)}
	ops := RegisterOperations(h)
	if len(ops) != 1 || ops[0].Return != math.MaxInt64 || !ops[0].Output.(regOutput).Unknown {
		t.Fatalf("an invoke without completion must be an unknown operation: %+v", ops)
	}
	if !porcupine.CheckOperations(registerModel, ops) {
		t.Fatal("a lone unknown write must be linearizable")
	}
}

func s(id uint64, inc int, sent, recv int64, master bool, epoch float64) Sample {
	return Sample{ID: id, Incarnation: inc, Sent: sent, Recv: recv, MasterSample: MasterSample{Master: master, Epoch: fmt.Sprint(epoch)}}
}

func TestCheckOverlap(t *testing.T) {
	clean := []Sample{
		s(1, 1, 0, 10, true, 1), s(1, 1, 50, 60, true, 1), s(1, 1, 100, 110, false, 1),
		s(2, 1, 120, 130, true, 1), s(2, 1, 170, 180, true, 1),
	}
	if vs := CheckOverlap(clean); len(vs) != 0 {
		t.Fatalf("hand-over: %v", vs)
	}
	overlap := append(append([]Sample(nil), clean...), s(2, 1, 20, 40, true, 1))
	if vs := CheckOverlap(overlap); len(vs) == 0 {
		t.Fatalf("overlap not caught: %v", vs)
	}
	// Polled at the same instants (the sampler polls every replica at once):
	// the middle poll of B lies inside A's run.
	sync := []Sample{
		s(1, 1, 0, 10, true, 1), s(2, 1, 0, 8, true, 1),
		s(1, 1, 50, 60, true, 1), s(2, 1, 50, 57, true, 1),
		s(1, 1, 100, 110, true, 1), s(2, 1, 100, 104, true, 1),
	}
	if vs := CheckOverlap(sync); len(vs) == 0 {
		t.Fatal("overlap seen by simultaneous polls not caught")
	}
	// Replica 1 paused (new incarnation after SIGCONT): no inference across.
	paused := []Sample{s(1, 1, 0, 10, true, 1), s(2, 1, 20, 40, true, 1), s(1, 2, 50, 60, true, 1)}
	if vs := CheckOverlap(paused); len(vs) != 0 {
		t.Fatalf("overlap inferred across a pause: %v", vs)
	}
	// Replica 1 became master anew in between (a new epoch).
	anew := []Sample{s(1, 1, 0, 10, true, 1), s(2, 1, 20, 40, true, 1), s(1, 1, 50, 60, true, 2)}
	if vs := CheckOverlap(anew); len(vs) != 0 {
		t.Fatalf("overlap inferred across a new mastership: %v", vs)
	}
}
