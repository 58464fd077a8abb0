package nemesis

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockcell/lockcell/tools/fencedkv"
)

// Violation is one broken property.
type Violation struct {
	// Checker names the checker that found it.
	Checker string
	// Text describes it.
	Text string
}

func (v Violation) String() string { return v.Checker + ": " + v.Text }

// Checker names.
const (
	CheckerFencing      = "fencing"
	CheckerInterleaving = "interleaving"
	CheckerLostUpdate   = "lost-update"
	CheckerAckSet       = "ack-set"
	CheckerLinearizable = "linearizable"
	CheckerRecovery     = "recovery"
	CheckerChecksums    = "checksums"
	CheckerOverlap      = "master-overlap"
	CheckerMutex        = "mutual-exclusion"
	// CheckerFloor fires when a checker judged less than its floor: a
	// check that judged nothing proves nothing.
	CheckerFloor = "floor"
	// CheckerFaults fires when a fault could not be applied.
	CheckerFaults = "faults"
)

// CheckResource checks the protected resource's records: per lock, the
// accepted writes' generations never decrease (fencing); the accepted
// writes of one grant are contiguous, never interleaved with another
// grant's (interleaving); and each accepted counter write is exactly one
// more than the counter write accepted before it (lost-update: two holders
// read the same value). lockOf maps a key to its lock.
func CheckResource(records []fencedkv.Record, lockOf func(key string) string) []Violation {
	var out []Violation
	if err := fencedkv.CheckFencing(records); err != nil {
		out = append(out, Violation{CheckerFencing, err.Error()})
	}
	type holder struct {
		gen, instance uint64
	}
	type lockState struct {
		cur     holder
		started bool
		done    map[holder]bool // grants whose writes have been overtaken
		counter uint64
	}
	locks := map[string]*lockState{}
	for _, r := range records {
		if !r.Accepted {
			continue
		}
		lk := lockOf(r.Key)
		st := locks[lk]
		if st == nil {
			st = &lockState{done: map[holder]bool{}}
			locks[lk] = st
		}
		h := holder{r.Sequencer.Generation, r.Sequencer.Instance}
		if !st.started || h != st.cur {
			if st.done[h] {
				out = append(out, Violation{CheckerInterleaving, fmt.Sprintf("write #%d to %s by grant generation %d resumed after another grant's writes (generation %d)", r.Seq, r.Key, h.gen, st.cur.gen)})
			}
			if st.started {
				st.done[st.cur] = true
			}
			st.cur, st.started = h, true
		}
		if strings.HasPrefix(r.Key, "counter-") {
			n, _, err := ParseCounter(string(r.Value))
			if err != nil {
				out = append(out, Violation{CheckerLostUpdate, fmt.Sprintf("write #%d: %v", r.Seq, err)})
				continue
			}
			if n != st.counter+1 {
				out = append(out, Violation{CheckerLostUpdate, fmt.Sprintf("write #%d to %s set %d after %d (generation %d): an update was lost", r.Seq, r.Key, n, st.counter, h.gen)})
			}
			st.counter = n
		}
	}
	return out
}

// CheckAckSet reports acknowledged creates (entries of op "create" that
// completed ok) missing from present.
func CheckAckSet(entries []Entry, present map[string]bool) (acked int, out []Violation) {
	for _, e := range entries {
		if e.Op != "create" || e.Type != TypeOK {
			continue
		}
		acked++
		if !present[e.Key] {
			out = append(out, Violation{CheckerAckSet, fmt.Sprintf("acknowledged create of %s (worker %d, at %s) is missing at the end", e.Key, e.Worker, time.Unix(0, e.Time).Format(time.RFC3339Nano))})
		}
	}
	return acked, out
}

// regInput and regOutput are porcupine's view of a register operation.
type regInput struct {
	Key   string
	Op    string // get, set, cas
	Value string
	Gen   uint64 // cas: expected generation
}

type regOutput struct {
	Unknown bool   // the outcome is unknown
	Failed  bool   // cas: definitely not applied (generation mismatch)
	Value   string // get
	Gen     uint64 // get: generation read; set/cas: generation produced
}

// regState is a register: its contents and content generation.
type regState struct {
	Value string
	Gen   uint64
}

// registerModel is a file with contents and a content generation that
// grows by one per write, created empty at generation 1.
var registerModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(regInput).Key
			if by[k] == nil {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		sort.Strings(keys)
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return regState{Gen: 1} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(regState), input.(regInput), output.(regOutput)
		switch in.Op {
		case "get":
			return out.Value == s.Value && out.Gen == s.Gen, s
		case "set":
			if out.Unknown {
				return true, regState{in.Value, s.Gen + 1}
			}
			return out.Gen == s.Gen+1, regState{in.Value, s.Gen + 1}
		case "cas":
			switch {
			case out.Unknown:
				if s.Gen == in.Gen {
					return true, regState{in.Value, s.Gen + 1}
				}
				return true, s
			case out.Failed:
				return s.Gen != in.Gen, s
			default:
				return s.Gen == in.Gen && out.Gen == s.Gen+1, regState{in.Value, s.Gen + 1}
			}
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		switch {
		case out.Unknown:
			return fmt.Sprintf("%s %s(%q, %d) -> ?", in.Key, in.Op, in.Value, in.Gen)
		case in.Op == "get":
			return fmt.Sprintf("%s get -> %q@%d", in.Key, out.Value, out.Gen)
		case out.Failed:
			return fmt.Sprintf("%s cas(%q, %d) -> mismatch", in.Key, in.Value, in.Gen)
		}
		return fmt.Sprintf("%s %s(%q, %d) -> @%d", in.Key, in.Op, in.Value, in.Gen, out.Gen)
	},
	DescribeState: func(state any) string { s := state.(regState); return fmt.Sprintf("%q@%d", s.Value, s.Gen) },
}

// RegisterOperations turns the register entries of a history into
// porcupine operations: an operation with outcome unknown (info, or an
// invoke never completed) may take effect at any time after its invocation,
// so it returns at +inf; failed reads are dropped (they had no effect).
func RegisterOperations(entries []Entry) []porcupine.Operation {
	type key struct {
		w  int
		id uint64
	}
	invokes := map[key]Entry{}
	var order []key
	var ops []porcupine.Operation
	for _, e := range entries {
		if e.Op != "get" && e.Op != "set" && e.Op != "cas" {
			continue
		}
		k := key{e.Worker, e.ID}
		if e.Type == TypeInvoke {
			invokes[k] = e
			order = append(order, k)
			continue
		}
		inv, ok := invokes[k]
		if !ok {
			continue
		}
		delete(invokes, k)
		in := regInput{Key: inv.Key, Op: inv.Op, Value: inv.Value, Gen: inv.Gen}
		op := porcupine.Operation{ClientId: e.Worker, Input: in, Call: inv.Time, Return: e.Time}
		switch e.Type {
		case TypeOK:
			op.Output = regOutput{Value: e.Value, Gen: e.Gen}
		case TypeFail:
			if inv.Op == "get" {
				continue
			}
			if inv.Op == "set" {
				// A set never fails definitely; treat as unknown.
				op.Output, op.Return = regOutput{Unknown: true}, math.MaxInt64
				break
			}
			op.Output = regOutput{Failed: true}
		default:
			op.Output, op.Return = regOutput{Unknown: true}, math.MaxInt64
		}
		ops = append(ops, op)
	}
	for _, k := range order {
		inv, ok := invokes[k]
		if !ok || inv.Op == "get" {
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: inv.Worker, Input: regInput{Key: inv.Key, Op: inv.Op, Value: inv.Value, Gen: inv.Gen},
			Call: inv.Time, Output: regOutput{Unknown: true}, Return: math.MaxInt64})
	}
	return ops
}

// CheckRegisters checks the register histories for linearizability (each
// file on its own, so each check stays small). A check that times out
// (porcupine.Unknown) is a violation too: an undecided check proves
// nothing.
func CheckRegisters(entries []Entry, timeout time.Duration) (ops int, decided bool, out []Violation) {
	h := RegisterOperations(entries)
	decided, out = registerVerdict(porcupine.CheckOperationsTimeout(registerModel, h, timeout), len(h), timeout)
	return len(h), decided, out
}

// registerVerdict turns porcupine's answer about n operations into
// violations.
func registerVerdict(res porcupine.CheckResult, n int, timeout time.Duration) (decided bool, out []Violation) {
	switch res {
	case porcupine.Ok:
		return true, nil
	case porcupine.Illegal:
		return true, []Violation{{CheckerLinearizable, fmt.Sprintf("the register history (%d operations) is not linearizable", n)}}
	}
	return false, []Violation{{CheckerLinearizable, fmt.Sprintf("porcupine could not decide the register history (%d operations) within %v: undecided", n, timeout)}}
}

// Sample is one poll of a replica's status page.
type Sample struct {
	ID          uint64
	Incarnation int
	Sent, Recv  int64 // Unix nanoseconds
	MasterSample
}

// CheckOverlap looks for two replicas serving as master at the same
// instant. Replica A is taken to serve throughout a run of consecutive
// samples that all say it serves, in the same incarnation and the same epoch
// (it did not become master anew in between): from the reply to the first
// to the request of the last. An incarnation ends at a crash and at a pause (SIGSTOP), so no
// inference spans one: a stopped replica serves nothing. Another replica B whose sample, taken wholly inside such a gap,
// says B serves, proves an overlap.
func CheckOverlap(samples []Sample) []Violation {
	by := map[uint64][]Sample{}
	for _, s := range samples {
		by[s.ID] = append(by[s.ID], s)
	}
	for _, ss := range by {
		sort.Slice(ss, func(i, j int) bool { return ss[i].Sent < ss[j].Sent })
	}
	type gap struct {
		id       uint64
		from, to int64
	}
	var gaps []gap
	for id, ss := range by {
		// Maximal runs of serving samples in one incarnation and one
		// mastership: A served throughout [first.Recv, last.Sent].
		for i := 0; i < len(ss); {
			j := i
			for j+1 < len(ss) && ss[i].Master && ss[j+1].Master && ss[j+1].Incarnation == ss[i].Incarnation && ss[j+1].Epoch == ss[i].Epoch {
				j++
			}
			if j > i && ss[i].Recv < ss[j].Sent {
				gaps = append(gaps, gap{id, ss[i].Recv, ss[j].Sent})
			}
			i = j + 1
		}
	}
	// Each replica's serving samples, in order of sending.
	serving := map[uint64][]Sample{}
	for id, ss := range by {
		for _, s := range ss {
			if s.Master {
				serving[id] = append(serving[id], s)
			}
		}
	}
	var out []Violation
	seen := map[[2]uint64]int64{}
	for _, g := range gaps {
		for id, ss := range serving {
			if id == g.id {
				continue
			}
			i := sort.Search(len(ss), func(i int) bool { return ss[i].Sent >= g.from })
			for ; i < len(ss) && ss[i].Sent <= g.to; i++ {
				s := ss[i]
				if s.Recv > g.to {
					continue
				}
				pair := [2]uint64{g.id, id}
				if last, ok := seen[pair]; ok && s.Sent-last < int64(time.Second) {
					continue // one report per pair and second
				}
				seen[pair] = s.Sent
				out = append(out, Violation{CheckerOverlap, fmt.Sprintf("replicas %d and %d both served as master at %s", g.id, id, time.Unix(0, s.Sent).Format("15:04:05.000"))})
			}
		}
	}
	return out
}
