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
	// Dur is a requested pause (Type pause) in nanoseconds.
	Dur int64 `json:"dur,omitempty"`
	// Text describes a nemesis event.
	Text string `json:"text,omitempty"`
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
	// TypePause: the worker asks to be SIGSTOPped for Dur and then told to
	// resume.
	TypePause = "pause"
	// TypeFault: the nemesis started a fault.
	TypeFault = "fault"
	// TypeHeal: the nemesis ended a fault.
	TypeHeal = "heal"
	// TypeNote: anything else worth keeping.
	TypeNote = "note"
)
