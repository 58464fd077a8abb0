package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Faults injects network faults into Endpoints for tests, without touching
// the operating system's network. Faults are switched at run time, from Go
// (Set, Partition, Isolate, Heal, ...) or from another process through
// Handler's small JSON API, which the cell mounts on its loopback admin
// listener.
//
// Peer messages meet faults as messages, not packets, because that is what
// Paxos must survive: a dropped message is gone (QUIC would retransmit a
// dropped packet), a delayed one arrives late, a duplicated one twice.
//
//   - Partition rules drop every matching message. They are checked on the
//     send path by the sender (From = its ID) and again on the receive path
//     by the receiver (To = its ID), so cutting a replica off works even when
//     only that replica's Faults is configured, as in a multi-process test.
//   - Drop, Duplicate and Delay apply on the send path only, so a Faults
//     shared by every Endpoint of an in-process cell applies them once.
//     Delay holds a message back without reordering the peer's stream: a
//     later message never overtakes a delayed one.
//   - ClientsCut names replicas whose client traffic vanishes: every UDP
//     packet to or from an address that is not a configured peer is dropped,
//     in both directions, so clients see a silent partition (their
//     KeepAlives time out) rather than a closed connection. It takes effect
//     only for an Endpoint created with this Faults (Listen wraps its
//     socket then; without Faults there is no wrapper and no cost).
//
// A Faults is safe for concurrent use. Its random choices come from a
// generator seeded by NewFaults, so a single-goroutine run repeats; the zero
// value works too, seeded with 0.
type Faults struct {
	mu struct {
		sync.Mutex
		state FaultState
		rng   *rand.Rand
	}
}

// Rule is one fault on the peer messages sent from one replica to another.
type Rule struct {
	// From is the sending replica; 0 matches any.
	From uint64
	// To is the receiving replica; 0 matches any.
	To uint64
	// Partition drops every matching message.
	Partition bool
	// Drop is the probability in [0, 1] that a matching message is dropped.
	Drop float64
	// Duplicate is the probability in [0, 1] that a matching message is
	// sent twice.
	Duplicate float64
	// Delay holds every matching message back this long, at most MaxDelay.
	Delay time.Duration
}

// FaultState is the whole configuration of a Faults.
type FaultState struct {
	// Rules apply to peer messages; a message meets every rule matching its
	// (From, To) pair.
	Rules []Rule `json:"rules"`
	// ClientsCut lists replicas whose client traffic is silently dropped.
	ClientsCut []uint64 `json:"clients_cut"`
}

// Limits of a FaultState.
const (
	// MaxDelay is the longest Rule.Delay.
	MaxDelay = time.Minute
	// MaxRules is the most rules a FaultState may hold.
	MaxRules = 1024
)

// ErrBadFaults reports a FaultState or JSON request that Faults refuses; the
// state is then unchanged.
var ErrBadFaults = errors.New("transport: bad fault rules")

// NewFaults returns a Faults with no rules whose random choices come from
// seed.
func NewFaults(seed uint64) *Faults {
	f := &Faults{}
	f.mu.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return f
}

// Validate checks s and returns an error wrapping ErrBadFaults if a
// probability is outside [0, 1], a delay outside [0, MaxDelay], or there
// are more than MaxRules rules.
func (s FaultState) Validate() error {
	if len(s.Rules) > MaxRules {
		return fmt.Errorf("%w: %d rules, at most %d", ErrBadFaults, len(s.Rules), MaxRules)
	}
	for i, r := range s.Rules {
		if !(r.Drop >= 0 && r.Drop <= 1) || !(r.Duplicate >= 0 && r.Duplicate <= 1) {
			return fmt.Errorf("%w: rule %d: probabilities must lie in [0, 1]", ErrBadFaults, i)
		}
		if r.Delay < 0 || r.Delay > MaxDelay {
			return fmt.Errorf("%w: rule %d: delay %v outside [0, %v]", ErrBadFaults, i, r.Delay, MaxDelay)
		}
	}
	return nil
}

func (s FaultState) clone() FaultState {
	return FaultState{Rules: slices.Clone(s.Rules), ClientsCut: slices.Clone(s.ClientsCut)}
}

// Set replaces the whole state, or returns an error wrapping ErrBadFaults
// and changes nothing.
func (f *Faults) Set(s FaultState) error {
	if err := s.Validate(); err != nil {
		return err
	}
	f.mu.Lock()
	f.mu.state = s.clone()
	f.mu.Unlock()
	return nil
}

// State returns a copy of the current state. Its slices are never nil, so
// its JSON form lists empty arrays rather than nulls.
func (f *Faults) State() FaultState {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.mu.state.clone()
	if s.Rules == nil {
		s.Rules = []Rule{}
	}
	if s.ClientsCut == nil {
		s.ClientsCut = []uint64{}
	}
	return s
}

// AddRule adds one rule, or returns an error wrapping ErrBadFaults and
// changes nothing.
func (f *Faults) AddRule(r Rule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	next := f.mu.state.clone()
	next.Rules = append(next.Rules, r)
	if err := next.Validate(); err != nil {
		return err
	}
	f.mu.state = next
	return nil
}

// Heal removes every rule and reconnects every client.
func (f *Faults) Heal() {
	f.mu.Lock()
	f.mu.state = FaultState{}
	f.mu.Unlock()
}

// Partition cuts the messages between replicas a and b in both directions.
func (f *Faults) Partition(a, b uint64) {
	f.mu.Lock()
	f.mu.state.Rules = append(f.mu.state.Rules, Rule{From: a, To: b, Partition: true}, Rule{From: b, To: a, Partition: true})
	f.mu.Unlock()
}

// PartitionOneWay cuts the messages from replica from to replica to only.
func (f *Faults) PartitionOneWay(from, to uint64) {
	f.mu.Lock()
	f.mu.state.Rules = append(f.mu.state.Rules, Rule{From: from, To: to, Partition: true})
	f.mu.Unlock()
}

// Isolate cuts every peer message to and from replica id.
func (f *Faults) Isolate(id uint64) {
	f.Partition(id, 0)
}

// CutClients drops (cut true) or restores (cut false) the client traffic of
// replica id.
func (f *Faults) CutClients(id uint64, cut bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.Index(f.mu.state.ClientsCut, id)
	switch {
	case cut && i < 0:
		f.mu.state.ClientsCut = append(f.mu.state.ClientsCut, id)
	case !cut && i >= 0:
		f.mu.state.ClientsCut = slices.Delete(f.mu.state.ClientsCut, i, i+1)
	}
}

func (r Rule) matches(from, to uint64) bool {
	return (r.From == 0 || r.From == from) && (r.To == 0 || r.To == to)
}

// verdict is what the send path does with one message.
type verdict struct {
	drop      bool
	duplicate bool
	delay     time.Duration
}

// onSend decides the fate of one message from → to. A nil Faults injects
// nothing.
func (f *Faults) onSend(from, to uint64) verdict {
	var v verdict
	if f == nil {
		return v
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.rng == nil { // a zero Faults, not made by NewFaults
		f.mu.rng = rand.New(rand.NewPCG(0, 0x9e3779b97f4a7c15))
	}
	for _, r := range f.mu.state.Rules {
		if !r.matches(from, to) {
			continue
		}
		if r.Partition || (r.Drop > 0 && f.mu.rng.Float64() < r.Drop) {
			v.drop = true
		}
		if r.Duplicate > 0 && f.mu.rng.Float64() < r.Duplicate {
			v.duplicate = true
		}
		v.delay = max(v.delay, r.Delay)
	}
	return v
}

// partitioned reports whether a partition rule cuts from → to (the receive
// path's check).
func (f *Faults) partitioned(from, to uint64) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.mu.state.Rules {
		if r.Partition && r.matches(from, to) {
			return true
		}
	}
	return false
}

// clientsCut reports whether replica id's client traffic is cut.
func (f *Faults) clientsCut(id uint64) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.mu.state.ClientsCut, id)
}

// jsonRule is the JSON form of a Rule: the delay is a Go duration string
// ("150ms").
type jsonRule struct {
	From      uint64  `json:"from"`
	To        uint64  `json:"to"`
	Partition bool    `json:"partition,omitempty"`
	Drop      float64 `json:"drop,omitempty"`
	Duplicate float64 `json:"duplicate,omitempty"`
	Delay     string  `json:"delay,omitempty"`
}

// MarshalJSON encodes r with its delay as a duration string.
func (r Rule) MarshalJSON() ([]byte, error) {
	j := jsonRule{From: r.From, To: r.To, Partition: r.Partition, Drop: r.Drop, Duplicate: r.Duplicate}
	if r.Delay != 0 {
		j.Delay = r.Delay.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes a rule, refusing unknown fields and bad delays.
func (r *Rule) UnmarshalJSON(b []byte) error {
	var j jsonRule
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("%w: %v", ErrBadFaults, err)
	}
	var d time.Duration
	if j.Delay != "" {
		var err error
		if d, err = time.ParseDuration(j.Delay); err != nil {
			return fmt.Errorf("%w: %v", ErrBadFaults, err)
		}
	}
	if math.IsNaN(j.Drop) || math.IsNaN(j.Duplicate) {
		return fmt.Errorf("%w: NaN probability", ErrBadFaults)
	}
	*r = Rule{From: j.From, To: j.To, Partition: j.Partition, Drop: j.Drop, Duplicate: j.Duplicate, Delay: d}
	return nil
}

// maxFaultsRequest caps a JSON request body.
const maxFaultsRequest = 1 << 20

// Handler returns an http.Handler serving a small JSON API over this Faults,
// meant for a loopback admin listener (it has no authentication of its own):
//
//	GET  /        the current FaultState
//	POST /rules   replace the state with the FaultState in the body
//	POST /heal    remove every rule and cut
//
// A FaultState is {"rules":[{"from":1,"to":2,"partition":true,"drop":0.1,
// "duplicate":0.05,"delay":"20ms"}],"clients_cut":[3]}; ids of 0 match any
// replica. Every reply is the resulting state as JSON; a bad request gets
// status 400 and {"error": "..."}, and changes nothing.
func (f *Faults) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		writeFaultsJSON(w, http.StatusOK, f.State())
	})
	mux.HandleFunc("POST /rules", func(w http.ResponseWriter, r *http.Request) {
		var s FaultState
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxFaultsRequest))
		dec.DisallowUnknownFields()
		err := dec.Decode(&s)
		if err == nil && dec.More() {
			err = errors.New("trailing data after the JSON object")
		}
		if err == nil {
			if _, terr := dec.Token(); terr != io.EOF {
				err = errors.New("trailing data after the JSON object")
			}
		}
		if err == nil {
			err = f.Set(s)
		}
		if err != nil {
			if !errors.Is(err, ErrBadFaults) {
				err = fmt.Errorf("%w: %v", ErrBadFaults, err)
			}
			writeFaultsJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeFaultsJSON(w, http.StatusOK, f.State())
	})
	mux.HandleFunc("POST /heal", func(w http.ResponseWriter, r *http.Request) {
		f.Heal()
		writeFaultsJSON(w, http.StatusOK, f.State())
	})
	return mux
}

func writeFaultsJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
