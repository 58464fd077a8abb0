package api

// This file is the per-method table that the cell and the client both read:
// how the master admits a call, whether only the master serves it, whether
// a client may repeat it after losing its reply, and whether the master may
// hold it open. The cell builds its dispatch from it and the client its
// retry decisions, so the two sides cannot disagree about a method.

// Admission is the class by which the master admits a call, once it has
// authenticated the caller (every method needs a client certificate or a
// tenant token). It decides what a tenant principal's call is charged
// against; the administrator belongs to no tenant and is never charged. A
// replica that is not master charges nothing: the call is refused with
// NotMaster, or is one a non-master serves (CellStatus).
type Admission uint8

// The admission classes.
const (
	// AdmitTenantRead is a read, or a change to the master's soft state
	// only (Close): charged against the tenant's
	// TenantQuota.OpsPerSecond; reads then share the tenant's slots for
	// concurrent reads.
	AdmitTenantRead Admission = 1 + iota
	// AdmitTenantWrite is a change to the replicated state: charged against
	// OpsPerSecond like a read; the command then queues for the tenant's
	// fair share of the master's proposals.
	AdmitTenantWrite
	// AdmitKeepAlive is a session's KeepAlive: charged against the tenant's
	// KeepAlivesPerSecond instead of OpsPerSecond, so that a tenant busy
	// with calls still keeps its sessions alive.
	AdmitKeepAlive
	// AdmitRelease is a call that gives resources back (Release,
	// CloseSession): never refused for rate, so that a tenant over its rate
	// can still shed what it holds.
	AdmitRelease
	// AdmitAdmin is the cell administrator's only: any other principal is
	// refused with PermissionDenied before the call does anything.
	AdmitAdmin

	numAdmissions // keep last
)

var admissionNames = [...]string{
	AdmitTenantRead:  "tenant-read",
	AdmitTenantWrite: "tenant-write",
	AdmitKeepAlive:   "session-keepalive",
	AdmitRelease:     "tenant-release",
	AdmitAdmin:       "admin",
}

// String returns the class's name, for example "tenant-read".
func (a Admission) String() string {
	if a >= 1 && a < numAdmissions {
		return admissionNames[a]
	}
	return "admission(" + itoa(uint64(a)) + ")"
}

// Idempotency says whether a client may repeat a call whose reply it lost
// (the request was sent, the answer never came, or came as Unavailable):
// whether a repeat can do harm that the first attempt did not.
type Idempotency uint8

// The idempotency values. The zero value is NotIdempotent, the safe
// default.
const (
	// NotIdempotent: a repeat may act twice (a second write), or answer
	// misleadingly (a repeated Delete says NotFound); a client reports the
	// lost reply (client.ErrOutcomeUnknown) instead of repeating.
	NotIdempotent Idempotency = iota
	// Idempotent: a repeat changes nothing the first attempt did not.
	// Where its answer differs (a repeated Acquire or Release is refused
	// with FailedPrecondition) the client reads back what happened.
	Idempotent
	// PerRequest: the request says (it implements IdempotentRequest), as
	// Open does: idempotent unless MustCreate.
	PerRequest
)

// IdempotentRequest is implemented by the requests of the PerRequest
// methods.
type IdempotentRequest interface {
	// Idempotent reports whether a repeat of this request is harmless.
	Idempotent() bool
}

// Idempotent reports that an Open without MustCreate is harmless to
// repeat; with MustCreate a repeat after a lost reply fails with
// AlreadyExists although the first attempt created the node.
func (r *OpenRequest) Idempotent() bool { return !r.MustCreate }

// CountedRequest is implemented by the requests the master admits as
// several calls of their method's admission class at once
// (CreateSessionsRequest): Ops is how many.
type CountedRequest interface {
	// Ops returns how many calls the request counts as.
	Ops() int
}

// MethodInfo describes one method for the cell and the client.
type MethodInfo struct {
	// Method is the method described.
	Method Method
	// Admission is the class by which the master admits a call.
	Admission Admission
	// NeedsMaster reports that only the master serves the method; any
	// other replica answers NotMaster. CellStatus alone is served by every
	// replica.
	NeedsMaster bool
	// Idempotency says whether a client may repeat a call whose reply was
	// lost.
	Idempotency Idempotency
	// LongPoll reports that the master may hold the call open until what
	// it waits for happens (a KeepAlive until the lease needs renewing or
	// an event arrives; an Acquire with Wait until the lock is granted), so
	// its duration is no measure of the master's speed.
	LongPoll bool
}

// Retryable reports whether a call of the method with request req may be
// repeated after its reply was lost (see Idempotency).
func (mi MethodInfo) Retryable(req any) bool {
	switch mi.Idempotency {
	case Idempotent:
		return true
	case PerRequest:
		ir, ok := req.(IdempotentRequest)
		return ok && ir.Idempotent()
	}
	return false
}

// methodTable has one entry per method.
var methodTable = []MethodInfo{
	{Method: MethodCreateSession, Admission: AdmitTenantWrite, NeedsMaster: true,
		// A lost reply leaves at most an orphan session that expires on
		// its own.
		Idempotency: Idempotent},
	// Like CreateSession: a lost reply leaves at most orphan sessions.
	{Method: MethodCreateSessions, Admission: AdmitTenantWrite, NeedsMaster: true, Idempotency: Idempotent},
	{Method: MethodKeepAlive, Admission: AdmitKeepAlive, NeedsMaster: true, Idempotency: Idempotent, LongPoll: true},
	{Method: MethodKeepAliveStream, Admission: AdmitKeepAlive, NeedsMaster: true, Idempotency: Idempotent, LongPoll: true},
	{Method: MethodKeepAliveBatch, Admission: AdmitKeepAlive, NeedsMaster: true, Idempotency: Idempotent, LongPoll: true},
	{Method: MethodCloseSession, Admission: AdmitRelease, NeedsMaster: true, Idempotency: Idempotent},
	{Method: MethodOpen, Admission: AdmitTenantWrite, NeedsMaster: true, Idempotency: PerRequest},
	{Method: MethodClose, Admission: AdmitTenantRead, NeedsMaster: true, Idempotency: Idempotent},
	{Method: MethodGetContentsAndStat, Admission: AdmitTenantRead, NeedsMaster: true, Idempotency: Idempotent},
	{Method: MethodGetStat, Admission: AdmitTenantRead, NeedsMaster: true, Idempotency: Idempotent},
	{Method: MethodReadDir, Admission: AdmitTenantRead, NeedsMaster: true, Idempotency: Idempotent},
	{Method: MethodSetContents, Admission: AdmitTenantWrite, NeedsMaster: true, Idempotency: NotIdempotent},
	{Method: MethodDelete, Admission: AdmitTenantWrite, NeedsMaster: true, Idempotency: NotIdempotent},
	{Method: MethodSetACL, Admission: AdmitTenantWrite, NeedsMaster: true, Idempotency: NotIdempotent},
	{Method: MethodAcquire, Admission: AdmitTenantWrite, NeedsMaster: true, Idempotency: Idempotent, LongPoll: true},
	{Method: MethodRelease, Admission: AdmitRelease, NeedsMaster: true, Idempotency: Idempotent},
	{Method: MethodGetSequencer, Admission: AdmitTenantRead, NeedsMaster: true, Idempotency: Idempotent},
	{Method: MethodCheckSequencer, Admission: AdmitTenantRead, NeedsMaster: true, Idempotency: Idempotent},
	// A repeated CreateTenant fails with AlreadyExists.
	{Method: MethodCreateTenant, Admission: AdmitAdmin, NeedsMaster: true, Idempotency: NotIdempotent},
	{Method: MethodUpdateTenant, Admission: AdmitAdmin, NeedsMaster: true, Idempotency: Idempotent},
	{Method: MethodListTenants, Admission: AdmitTenantRead, NeedsMaster: true, Idempotency: Idempotent},
	{Method: MethodListSessions, Admission: AdmitTenantRead, NeedsMaster: true, Idempotency: Idempotent},
	{Method: MethodListLocks, Admission: AdmitTenantRead, NeedsMaster: true, Idempotency: Idempotent},
	{Method: MethodCellStatus, Admission: AdmitTenantRead, NeedsMaster: false, Idempotency: Idempotent},
	// A repeated StepDown asks the successor to step down.
	{Method: MethodStepDown, Admission: AdmitAdmin, NeedsMaster: true, Idempotency: NotIdempotent},
	// A lost IssueToken reply leaves a token nobody knows; a repeated
	// RevokeToken fails with NotFound.
	{Method: MethodIssueToken, Admission: AdmitAdmin, NeedsMaster: true, Idempotency: NotIdempotent},
	{Method: MethodRevokeToken, Admission: AdmitAdmin, NeedsMaster: true, Idempotency: NotIdempotent},
	{Method: MethodListTokens, Admission: AdmitAdmin, NeedsMaster: true, Idempotency: Idempotent},
	{Method: MethodSaveSnapshot, Admission: AdmitAdmin, NeedsMaster: true, Idempotency: Idempotent},
	// Membership changes go step by step, and each request resumes where
	// an interrupted one stopped (a repeat of a finished one reports the
	// membership). They wait for a new replica to catch up, so they may
	// take long.
	{Method: MethodAddReplica, Admission: AdmitAdmin, NeedsMaster: true, Idempotency: Idempotent, LongPoll: true},
	{Method: MethodRemoveReplica, Admission: AdmitAdmin, NeedsMaster: true, Idempotency: Idempotent, LongPoll: true},
	{Method: MethodReplaceReplica, Admission: AdmitAdmin, NeedsMaster: true, Idempotency: Idempotent, LongPoll: true},
}

// methodIndex is methodTable by method number.
var methodIndex = func() (ix [numMethods]MethodInfo) {
	for _, mi := range methodTable {
		if mi.Method.Valid() {
			ix[mi.Method] = mi
		}
	}
	return ix
}()

// Methods returns the table: one entry per method, in no particular order.
// The slice is a copy.
func Methods() []MethodInfo {
	return append([]MethodInfo(nil), methodTable...)
}

// Info returns the method's entry; ok is false for an unknown method.
func (m Method) Info() (mi MethodInfo, ok bool) {
	if !m.Valid() || methodIndex[m].Method != m {
		return MethodInfo{}, false
	}
	return methodIndex[m], true
}
