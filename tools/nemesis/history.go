package nemesis

// Entry is one line of a run's history: a worker's operation (an invoke
// followed by its completion, matched by Worker and ID), a worker's request
// to be paused, or a nemesis event. Workers write entries as JSON lines on
// their standard output; the nemesis adds its own and writes the whole
// history to a file when a run fails.
type Entry struct {
	// Time is the wall-clock time in Unix nanoseconds (every process of a
	// run shares the host's clock).
	Time int64 `json:"t"`
	// Source is "w<N>" for worker N, "nemesis" or "sampler".
	Source string `json:"src"`
	// Type is one of the Type* constants.
	Type string `json:"type"`
	// Worker and ID identify an operation (Type invoke, ok, fail, info).
	Worker int    `json:"w,omitempty"`
	ID     uint64 `json:"id,omitempty"`
	// Op is the operation: get, set, cas, create, fenced.
	Op string `json:"op,omitempty"`
	// Key is the file or resource key the operation is about.
	Key string `json:"key,omitempty"`
	// Value is the value written (set, cas) or read (get).
	Value string `json:"v,omitempty"`
	// Gen is the expected content generation of a cas, or the generation a
	// get read or a set/cas produced.
	Gen uint64 `json:"gen,omitempty"`
	// Err says why an operation failed or is uncertain.
	Err string `json:"err,omitempty"`
	// Text describes a nemesis event.
	Text string `json:"text,omitempty"`
	// Start and End are host monotonic nanoseconds (MonoNow): a hold's
	// interval (Type hold), or when the nemesis stopped and continued a
	// worker (Type stopped).
	Start int64 `json:"m0,omitempty"`
	End   int64 `json:"m1,omitempty"`
	// Intact reports, for a hold, that the lock's context was intact at its
	// end; Err then holds the cause if it was not.
	Intact bool `json:"intact,omitempty"`
	// Session is the worker's session (Type hold).
	Session uint64 `json:"sess,omitempty"`
	// Stale marks a fenced write made after the holder found its lock lost
	// (a zombie's write).
	Stale bool `json:"stale,omitempty"`
}

// Entry types.
const (
	// TypeInvoke: an operation starts.
	TypeInvoke = "invoke"
	// TypeOK: it completed and took effect (reads: returned a value).
	TypeOK = "ok"
	// TypeFail: it completed and definitely took no effect.
	TypeFail = "fail"
	// TypeInfo: its outcome is unknown; it may take effect at any later
	// time.
	TypeInfo = "info"
	// TypePause: a zombie worker holds its lock and waits to be stopped;
	// the nemesis stops it for longer than the session lease.
	TypePause = "pause"
	// TypeStopped: the nemesis stopped a worker (Start) and continued it
	// (End).
	TypeStopped = "stopped"
	// TypeHold: a worker's hold of a lock (Key), see Hold.
	TypeHold = "hold"
	// TypeFault: the nemesis started a fault.
	TypeFault = "fault"
	// TypeHeal: the nemesis ended a fault.
	TypeHeal = "heal"
	// TypeNote: anything else worth keeping.
	TypeNote = "note"
)
