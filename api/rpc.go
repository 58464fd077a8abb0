package api

// This file is the request/response contract between clients and the cell.
// Each RPC is one QUIC stream: the client writes one request frame whose tag
// is the Method, and the master answers with one frame tagged ReplyOK (body:
// the method's response type) or ReplyError (body: *Error). KeepAlive is the
// same exchange on a stream the master holds open as a long-poll; a client
// with many sessions sends their KeepAlives on one KeepAliveStream instead
// (KeepAliveStreamRequest), so that it parks one stream, not one per
// session, and batches them there (KeepAliveBatchRequest), so that the
// master parks one long-poll per connection, not one per session.
//
// Every request after CreateSession names its session and the master epoch
// the client believes in; a request from an older epoch is refused with
// Failover (Chubby §2.9) so that a client notices every change of master.

// Method identifies an RPC; it is the tag of the request frame. Numbers are
// stable: a method's number never changes meaning.
type Method uint16

// The methods.
const (
	MethodCreateSession Method = 1 + iota
	MethodKeepAlive
	MethodCloseSession
	MethodOpen
	MethodClose
	MethodGetContentsAndStat
	MethodGetStat
	MethodReadDir
	MethodSetContents
	MethodDelete
	MethodSetACL
	MethodAcquire
	MethodRelease
	MethodGetSequencer
	MethodCheckSequencer
	MethodCreateTenant
	MethodUpdateTenant
	MethodListTenants
	MethodListSessions
	MethodListLocks
	MethodCellStatus
	MethodStepDown
	MethodIssueToken
	MethodRevokeToken
	MethodListTokens
	MethodSaveSnapshot
	MethodKeepAliveStream
	MethodKeepAliveBatch
	MethodAddReplica
	MethodRemoveReplica
	MethodReplaceReplica
	MethodCreateSessions

	numMethods // keep last
)

var methodNames = [...]string{
	MethodCreateSession:      "CreateSession",
	MethodKeepAlive:          "KeepAlive",
	MethodCloseSession:       "CloseSession",
	MethodOpen:               "Open",
	MethodClose:              "Close",
	MethodGetContentsAndStat: "GetContentsAndStat",
	MethodGetStat:            "GetStat",
	MethodReadDir:            "ReadDir",
	MethodSetContents:        "SetContents",
	MethodDelete:             "Delete",
	MethodSetACL:             "SetACL",
	MethodAcquire:            "Acquire",
	MethodRelease:            "Release",
	MethodGetSequencer:       "GetSequencer",
	MethodCheckSequencer:     "CheckSequencer",
	MethodCreateTenant:       "CreateTenant",
	MethodUpdateTenant:       "UpdateTenant",
	MethodListTenants:        "ListTenants",
	MethodListSessions:       "ListSessions",
	MethodListLocks:          "ListLocks",
	MethodCellStatus:         "CellStatus",
	MethodStepDown:           "StepDown",
	MethodIssueToken:         "IssueToken",
	MethodRevokeToken:        "RevokeToken",
	MethodListTokens:         "ListTokens",
	MethodSaveSnapshot:       "SaveSnapshot",
	MethodKeepAliveStream:    "KeepAliveStream",
	MethodKeepAliveBatch:     "KeepAliveBatch",
	MethodAddReplica:         "AddReplica",
	MethodRemoveReplica:      "RemoveReplica",
	MethodReplaceReplica:     "ReplaceReplica",
	MethodCreateSessions:     "CreateSessions",
}

// String returns the method's name, for example "Acquire".
func (m Method) String() string {
	if m >= 1 && m < numMethods {
		return methodNames[m]
	}
	return "method(" + itoa(uint64(m)) + ")"
}

// Valid reports whether m is a known method.
func (m Method) Valid() bool { return m >= 1 && m < numMethods }

// Reply tags. They lie far above the method numbers so a reply can never be
// mistaken for a request.
const (
	// ReplyOK tags a successful reply; its body is the method's response.
	ReplyOK uint16 = 0xFF00
	// ReplyError tags a failed reply; its body is an *Error.
	ReplyError uint16 = 0xFF01
)

// Header is carried by every request made within a session, and by the
// sessionless calls that embed it (tenants, listings, tokens, step-down),
// where Session and Epoch are zero.
type Header struct {
	// Session is the caller's session.
	Session uint64 `msgpack:"s"`
	// Epoch is the master epoch the client believes in (from
	// CreateSessionResponse or the last KeepAlive). A request whose epoch is
	// not the master's current one fails with Failover.
	Epoch uint64 `msgpack:"e"`
	// Token is the caller's tenant token, for a client that has no client
	// certificate. Every request of such a client carries it: each RPC is
	// its own stream, so the cell authenticates every call, and a revoked
	// token stops working at once, on every call (see IssueTokenRequest). A
	// client with a certificate must leave it empty.
	Token string `msgpack:"tk,omitempty"`
}

// Credential returns the tenant token the request carries ("" for none).
// It is promoted to every request type that embeds Header.
func (h Header) Credential() string { return h.Token }

// EventMask selects the node events a handle delivers to its session.
type EventMask uint16

// The event mask bits.
const (
	WantContentsModified EventMask = 1 << iota
	WantChildAdded
	WantChildRemoved
	WantLockAcquired
	WantConflictingLock
)

// Handle names an open node. It is self-describing, so a new master can
// re-establish it on first use after a fail-over (Chubby §2.9): it names the
// session that opened it, the path, and the node instance it was opened on;
// if the node was deleted (or deleted and created again) the handle is
// invalid and calls on it fail with NotFound.
type Handle struct {
	Session  uint64    `msgpack:"s"`
	Path     string    `msgpack:"p"`
	Instance uint64    `msgpack:"i"`
	Events   EventMask `msgpack:"ev,omitempty"`
	// Cache reports that the session caches the node's contents and
	// metadata through this handle (see OpenRequest.Cache).
	Cache bool `msgpack:"c,omitempty"`
}

// Empty is the response of calls that return nothing but success.
type Empty struct{}

// CreateSessionRequest opens a session. The principal comes from the
// connection's client certificate, or from Token.
type CreateSessionRequest struct {
	// Token is a tenant token (an alternative to a client certificate). A
	// session created with a token is bound to the token's principal; every
	// later call of the session carries the same token in its Header.
	Token string `msgpack:"tk,omitempty"`
}

// Credential returns the tenant token the request carries ("" for none).
func (r CreateSessionRequest) Credential() string { return r.Token }

// CreateSessionResponse describes the new session.
type CreateSessionResponse struct {
	Session uint64 `msgpack:"s"`
	Epoch   uint64 `msgpack:"e"`
	// LeaseTimeout is how long, from when the request was sent, the session
	// is guaranteed to live without a KeepAlive, in nanoseconds.
	LeaseTimeout int64  `msgpack:"lt"`
	Principal    string `msgpack:"p"`
	Tenant       string `msgpack:"t"`
	// Cadence is KeepAliveResponse.Cadence, known before the first
	// KeepAlive (nanoseconds; zero: none).
	Cadence int64 `msgpack:"ca,omitempty"`
}

// MaxCreateSessions bounds CreateSessionsRequest.Count. It is the default
// bound of a tenant's queue at the master (cell.DefaultTenantQueue), so
// that a full batch of a tenant with nothing queued is not shed in part.
const MaxCreateSessions = 256

// CreateSessionsRequest opens Count sessions in one call, each exactly as a
// CreateSession of its own would: the master admits the call as Count
// tenant writes (a rate that allows only some of them creates those, and
// the rest are shed with a RetryAfter), proposes Count commands together,
// and each is held to the tenant's session quota in turn, so that a batch
// that would pass the quota creates the sessions that fit and refuses the
// rest. A Count outside 1..MaxCreateSessions is refused with
// InvalidArgument and creates nothing. A replica that predates the method
// answers it as an unknown method.
type CreateSessionsRequest struct {
	// Count is how many sessions to create.
	Count int `msgpack:"n"`
	// Token is CreateSessionRequest.Token.
	Token string `msgpack:"tk,omitempty"`
}

// Credential returns the tenant token the request carries ("" for none).
func (r CreateSessionsRequest) Credential() string { return r.Token }

// Ops returns how many tenant writes the call counts as: Count.
func (r CreateSessionsRequest) Ops() int { return r.Count }

// CreateSessionsResponse answers CreateSessionsRequest: one entry per
// session asked for, in the order the master created them. Epoch,
// Principal, Tenant and Cadence are those of CreateSessionResponse, shared
// by every session of the call.
type CreateSessionsResponse struct {
	Epoch     uint64 `msgpack:"e"`
	Principal string `msgpack:"p"`
	Tenant    string `msgpack:"t"`
	Cadence   int64  `msgpack:"ca,omitempty"`
	// Sessions has exactly Count entries.
	Sessions []CreatedSession `msgpack:"ss"`
}

// CreatedSession is one entry of CreateSessionsResponse: a session
// (Session and LeaseTimeout, as in CreateSessionResponse, the lease counted
// from when the request was sent) or, if this one was not created, Err (a
// shed entry's Err is ResourceExhausted with a RetryAfter, as a shed
// CreateSession's would be).
type CreatedSession struct {
	Session      uint64 `msgpack:"s,omitempty"`
	LeaseTimeout int64  `msgpack:"lt,omitempty"`
	Err          *Error `msgpack:"err,omitempty"`
}

// KeepAliveRequest is the long-poll that keeps a session alive. Ack
// acknowledges every event with a sequence number up to it.
type KeepAliveRequest struct {
	Header
	Ack uint64 `msgpack:"a"`
}

// KeepAliveStreamRequest is one KeepAlive sent on a connection's KeepAlive
// stream. That stream carries the KeepAlives of every session on the
// connection, so a connection parks one stream however many sessions it
// carries: the client opens it with a frame tagged MethodKeepAliveStream
// and goes on writing such frames, one per KeepAlive, for the
// connection's life; the master answers each, whenever its long-poll ends,
// with a frame tagged ReplyOK whose body is a KeepAliveStreamReply naming
// the same Call. Each KeepAlive keeps its own rules exactly (the lease it
// proves runs from its own send, Held is its own). A malformed frame ends
// the stream with a ReplyError frame.
type KeepAliveStreamRequest struct {
	// Call is the client's number for this KeepAlive, echoed in its reply.
	Call      uint64           `msgpack:"c"`
	KeepAlive KeepAliveRequest `msgpack:"k"`
}

// KeepAliveStreamReply answers one KeepAliveStreamRequest: exactly one of
// KeepAlive and Err is set.
type KeepAliveStreamReply struct {
	// Call is the request's Call.
	Call      uint64             `msgpack:"c"`
	KeepAlive *KeepAliveResponse `msgpack:"k,omitempty"`
	Err       *Error             `msgpack:"err,omitempty"`
}

// KeepAliveBatchRequest carries the KeepAlives of many sessions in one
// frame of a connection's KeepAlive stream (see KeepAliveStreamRequest):
// a client opens the stream with a frame tagged MethodKeepAliveBatch and
// goes on writing such frames. The master serves each entry as it serves
// a KeepAliveStreamRequest (its own authentication, admission, lease and
// events), parks the batch as one long-poll, and answers it with one frame
// tagged ReplyOK whose body is a KeepAliveBatchReply, normally carrying
// every entry's reply: at the cadence, or early when any of the sessions
// has events to deliver (then every entry's lease is renewed too). An
// entry's failure is its own reply's Err. A malformed frame ends the
// stream with a ReplyError frame.
//
// A replica that predates the method answers the first frame with a
// ReplyError of code InvalidArgument, "unknown method ..." (or, to a
// client without a certificate, Unauthenticated); a client then sends
// per-session KeepAliveStreamRequests on a stream of their own.
type KeepAliveBatchRequest struct {
	// KeepAlives are the entries, each numbered by its Call (unique on the
	// stream).
	KeepAlives []KeepAliveStreamRequest `msgpack:"k"`
}

// KeepAliveBatchReply answers entries of KeepAliveBatchRequests, each
// reply naming its entry's Call. The master answers a whole batch in one
// reply, but a client must accept the replies of a batch spread over
// several frames.
type KeepAliveBatchReply struct {
	Replies []KeepAliveStreamReply `msgpack:"r"`
}

// KeepAliveResponse extends the session's lease and carries pending events.
type KeepAliveResponse struct {
	// LeaseTimeout is how long the lease lasts from when the master sent
	// this reply, in nanoseconds.
	LeaseTimeout int64 `msgpack:"lt"`
	// Held is how long, in nanoseconds on the master's clock, the master
	// held the request between its arrival and the reply (a KeepAlive is a
	// long-poll). The lease therefore lasts at least Held+LeaseTimeout from
	// when the client sent the request; a client counts that, shortened by
	// its clock-drift bound.
	Held int64 `msgpack:"h,omitempty"`
	// Epoch is the master's epoch.
	Epoch  uint64  `msgpack:"e"`
	Events []Event `msgpack:"ev,omitempty"`
	// Cadence, if not zero, is the longest the master parks a KeepAlive
	// (nanoseconds): it answers every KeepAlive within Cadence of its
	// arrival while it stays master. A client that hears nothing for
	// longer (and a margin for the network) knows the master is dead,
	// deposed or cut off, and looks for the master among all replicas
	// instead of waiting for its connection to time out. Zero: the master
	// parks a KeepAlive until shortly before the lease ends.
	Cadence int64 `msgpack:"ca,omitempty"`
}

// CloseSessionRequest ends the caller's session: its locks are released
// without lock-delay and its ephemeral nodes deleted.
type CloseSessionRequest struct {
	Header
}

// OpenRequest opens, and optionally creates, a node.
type OpenRequest struct {
	Header
	Path string `msgpack:"p"`
	// Create makes the node if it is missing; MustCreate fails with
	// AlreadyExists if it exists.
	Create     bool `msgpack:"c,omitempty"`
	MustCreate bool `msgpack:"x,omitempty"`
	// The fields below apply only when the node is created.
	Dir       bool      `msgpack:"d,omitempty"`
	Ephemeral bool      `msgpack:"eph,omitempty"`
	Contents  []byte    `msgpack:"b,omitempty"`
	ACL       *ACLNames `msgpack:"a,omitempty"`
	// LockDelay in nanoseconds; 0 means the cell default, -1 none.
	LockDelay int64 `msgpack:"l,omitempty"`
	// Events selects the events the handle delivers.
	Events EventMask `msgpack:"ev,omitempty"`
	// Cache asks the master to keep this session's cache of the node
	// consistent: every read through the handle that answers Cacheable
	// registers the session as caching the node, and before any later write
	// to the node completes the master sends the session an
	// EventContentsModified (for a delete, EventHandleInvalid) and waits
	// until the session acknowledged it (KeepAlive Ack) or its lease ran
	// out (Chubby §2.5). The session is then no longer caching the node
	// until it reads it again.
	Cache bool `msgpack:"cache,omitempty"`
}

// OpenResponse returns the handle and the node's metadata.
type OpenResponse struct {
	Handle  Handle   `msgpack:"h"`
	Stat    NodeStat `msgpack:"st"`
	Created bool     `msgpack:"c,omitempty"`
}

// HandleRequest is the request of calls that need only a handle: Close,
// GetContentsAndStat, GetStat, Delete, GetSequencer.
type HandleRequest struct {
	Header
	Handle Handle `msgpack:"h"`
}

// ContentsResponse carries a node's contents and metadata. Cacheable
// reports that the master registered the session as caching the node (the
// handle has Cache, and no write to the node was in progress): the client
// may keep the answer until it is invalidated.
type ContentsResponse struct {
	Contents  []byte   `msgpack:"b"`
	Stat      NodeStat `msgpack:"st"`
	Cacheable bool     `msgpack:"c,omitempty"`
}

// StatResponse carries a node's metadata; Cacheable as in
// ContentsResponse.
type StatResponse struct {
	Stat      NodeStat `msgpack:"st"`
	Cacheable bool     `msgpack:"c,omitempty"`
}

// ReadDirRequest lists a directory's children in name order, a page at a
// time: After is the last name of the previous page ("" for the first).
type ReadDirRequest struct {
	Header
	Handle Handle `msgpack:"h"`
	After  string `msgpack:"a,omitempty"`
	// Limit bounds the page; 0 means the cell's default.
	Limit int `msgpack:"l,omitempty"`
}

// ReadDirResponse is one page of a directory listing; Next, if not empty,
// is the After of the following page.
type ReadDirResponse struct {
	Entries []DirEntry `msgpack:"e"`
	Next    string     `msgpack:"n,omitempty"`
}

// SetContentsRequest writes a file; with IfGeneration not zero only if the
// content generation equals it.
type SetContentsRequest struct {
	Header
	Handle       Handle `msgpack:"h"`
	Contents     []byte `msgpack:"b"`
	IfGeneration uint64 `msgpack:"g,omitempty"`
}

// SetACLRequest replaces a node's ACL names; with IfGeneration not zero only
// if the ACL generation equals it.
type SetACLRequest struct {
	Header
	Handle       Handle   `msgpack:"h"`
	ACL          ACLNames `msgpack:"a"`
	IfGeneration uint64   `msgpack:"g,omitempty"`
}

// AcquireRequest takes the node's lock. With Wait the call waits in the
// lock's FIFO queue at the master until granted or until the caller cancels
// (which leaves no waiter behind); without it, it fails at once with Locked
// or LockDelay.
type AcquireRequest struct {
	Header
	Handle Handle   `msgpack:"h"`
	Mode   LockMode `msgpack:"m"`
	Wait   bool     `msgpack:"w,omitempty"`
}

// SequencerResponse carries a lock's sequencer (the encoding of
// sequencer.Sequencer, signed by the cell) and its generation.
type SequencerResponse struct {
	Sequencer  []byte   `msgpack:"q"`
	Generation uint64   `msgpack:"g"`
	Mode       LockMode `msgpack:"m"`
}

// ReleaseRequest gives up the caller's hold of a lock. Generation must be
// the generation being released, so a stale release frees nothing newer.
type ReleaseRequest struct {
	Header
	Handle     Handle `msgpack:"h"`
	Generation uint64 `msgpack:"g"`
}

// CheckSequencerRequest asks whether a sequencer is still current: the lock
// is held in its mode at its generation on the same node instance.
type CheckSequencerRequest struct {
	Header
	Sequencer []byte `msgpack:"q"`
}

// CheckSequencerResponse answers CheckSequencerRequest; Reason says why a
// sequencer is not current.
type CheckSequencerResponse struct {
	Valid  bool   `msgpack:"v"`
	Reason string `msgpack:"r,omitempty"`
}

// TenantRequest creates or updates a tenant (cell administrator only).
type TenantRequest struct {
	Header
	Name  string      `msgpack:"n"`
	Quota TenantQuota `msgpack:"q"`
	// ACL names the new tenant root's ACL files (CreateTenant only).
	ACL ACLNames `msgpack:"a,omitempty"`
}

// TenantResponse describes a tenant.
type TenantResponse struct {
	Tenant TenantInfo `msgpack:"t"`
}

// ListRequest lists the tenants (administrator), or the sessions or held
// locks of a tenant (its own principals or the administrator).
type ListRequest struct {
	Header
	Tenant string `msgpack:"t,omitempty"`
}

// ListTenantsResponse lists tenants.
type ListTenantsResponse struct {
	Tenants []TenantInfo `msgpack:"t"`
}

// ListSessionsResponse lists sessions.
type ListSessionsResponse struct {
	Sessions []SessionInfo `msgpack:"s"`
}

// ListLocksResponse lists held locks.
type ListLocksResponse struct {
	Locks []LockInfo `msgpack:"l"`
}

// CellStatusRequest asks any replica for the cell's status. It needs no
// session and is answered by non-masters too, but it needs credentials (a
// client certificate or Token) like every other call.
//
// With Except set it is a long-poll for a fail-over: a client whose master
// (replica Except) went silent asks every replica "who is master, other
// than Except?", and each answers as soon as it knows one (it serves as
// master itself, or its Paxos view names another leader), or once Wait has
// passed, whichever comes first, so that the client hears of the new master
// the moment the election ends rather than by asking again and again. A
// replica that predates the field ignores it and answers at once.
type CellStatusRequest struct {
	// Token is the caller's tenant token, if it has no certificate.
	Token string `msgpack:"tk,omitempty"`
	// Except, if not zero, is the replica the caller no longer trusts as
	// master: the answer waits until the replica knows a leader other than
	// Except, or Wait has passed.
	Except uint64 `msgpack:"x,omitempty"`
	// Wait bounds how long, in nanoseconds, an Except call waits before it
	// is answered with the status as it is. Zero, negative or above
	// MaxStatusWait means MaxStatusWait. Ignored without Except.
	Wait int64 `msgpack:"w,omitempty"`
}

// MaxStatusWait is the longest a replica holds a CellStatus long-poll
// (CellStatusRequest.Except) before it answers with the status as it is.
const MaxStatusWait = 10_000_000_000 // 10 s, in nanoseconds

// Credential returns the tenant token the request carries ("" for none).
func (r CellStatusRequest) Credential() string { return r.Token }

// ReplicaStatus is one replica as the answering replica sees it: itself
// as it is, every other replica as that replica last reported itself (each
// replica reports its progress to its peers several times a second).
type ReplicaStatus struct {
	ID      uint64 `msgpack:"id"`
	Addr    string `msgpack:"a"`
	Chosen  uint64 `msgpack:"c"`
	Applied uint64 `msgpack:"ap"`
	// Lag is how many slots the replica has yet to apply of the highest
	// chosen slot the answering replica knows of (its own, or one a peer
	// reported).
	Lag uint64 `msgpack:"l"`
	// Master reports the master.
	Master bool `msgpack:"m,omitempty"`
	// Role is the replica's role as it last reported it (RoleUnknown if it
	// never reported to the answering replica).
	Role Role `msgpack:"ro,omitempty"`
	// Epoch is the epoch the replica last reported.
	Epoch Epoch `msgpack:"e,omitempty"`
	// HeardMillis is how long ago, in milliseconds, the answering replica
	// heard the replica's latest report: 0 for the answering replica
	// itself, -1 if it never heard one.
	HeardMillis int64 `msgpack:"h,omitempty"`
	// Learner reports a member that votes in nothing yet: a replica being
	// added, which is promoted to voter once it has caught up.
	Learner bool `msgpack:"ln,omitempty"`
}

// CellStatusResponse describes the cell. A tenant principal learns only
// what it needs to find the master and check sequencers (Cell, Replica,
// Master, Epoch, Role, the replicas' IDs, addresses, roles and master flag,
// PublicKey); the progress fields (Chosen, Applied, Checksum and the
// replicas' Chosen, Applied, Lag), which reveal the whole cell's write
// activity, are filled in only for the cell administrator. Any replica
// answers, master or not, with what it knows of itself and its peers.
type CellStatusResponse struct {
	Cell    string `msgpack:"cell"`
	Replica uint64 `msgpack:"r"`
	// Master is the replica the answering replica believes is master (0 if
	// it knows of none).
	Master   uint64          `msgpack:"m"`
	Epoch    Epoch           `msgpack:"e"`
	Chosen   uint64          `msgpack:"c"`
	Applied  uint64          `msgpack:"ap"`
	Checksum Checksum        `msgpack:"ck"`
	Replicas []ReplicaStatus `msgpack:"rs"`
	// PublicKey is the cell's Ed25519 key that signs sequencers.
	PublicKey []byte `msgpack:"pk,omitempty"`
	// Role is what the answering replica does (RoleMaster, RoleLeader,
	// RoleCandidate, RoleFollower, or RoleLearner for a replica that lost
	// its durable state and votes in nothing until it has rebuilt).
	Role Role `msgpack:"ro,omitempty"`
	// Rebuild, for the cell administrator only, says what state the
	// answering replica lost and how far its rebuild has come ("" if it
	// started with its state).
	Rebuild string `msgpack:"rb,omitempty"`
	// MasterLease is the cell's master lease in nanoseconds (0 from a
	// replica that predates the field): a client derives from it how long
	// a call may go unanswered before it suspects its master and asks the
	// replicas who the master is (a live master renews its lease four
	// times per lease and answers well within it).
	MasterLease int64 `msgpack:"ml,omitempty"`
	// MembershipSlot is the Paxos slot at which the membership in
	// Replicas was chosen, as far as the answering replica has applied the
	// log (0: the cell's first membership).
	MembershipSlot uint64 `msgpack:"ms,omitempty"`
}

// StepDownRequest asks the master to hand mastership over (administrator
// only); Next, if not zero, names the preferred successor.
type StepDownRequest struct {
	Header
	Next uint64 `msgpack:"n,omitempty"`
}

// StepDownResponse answers a StepDown once the master has stopped serving:
// Successor is the replica it handed mastership to (0 if it stepped down
// without naming one). A cell that predates it answers an empty message,
// which decodes as Successor 0.
type StepDownResponse struct {
	Successor uint64 `msgpack:"s,omitempty"`
}

// IssueTokenRequest asks the cell administrator's master to issue a tenant
// token for Principal of Tenant. The master generates the secret; the
// replicated state keeps only its SHA-256 hash, so the token is shown once,
// in the response, and survives fail-over and restart. A token authenticates
// like a client certificate for Tenant/Principal until it is revoked.
type IssueTokenRequest struct {
	Header
	Tenant    string `msgpack:"t"`
	Principal string `msgpack:"p"`
}

// TokenInfo describes an issued token without its secret.
type TokenInfo struct {
	// ID names the token (for RevokeToken); it is not secret.
	ID        string `msgpack:"id"`
	Tenant    string `msgpack:"t"`
	Principal string `msgpack:"p"`
	Created   int64  `msgpack:"ct"`
}

// IssueTokenResponse carries the new token. Token is the secret credential
// ("lct1_<id>_<secret>"); the cell cannot show it again.
type IssueTokenResponse struct {
	Token string    `msgpack:"tk"`
	Info  TokenInfo `msgpack:"i"`
}

// RevokeTokenRequest revokes a token (cell administrator only); the reply
// is an IssueTokenResponse with only Info set. From the
// moment the revocation is applied, every call carrying the token fails
// with Unauthenticated, and the master expires every session that was
// created or used with it (its locks are released with lock-delay and its
// ephemeral nodes deleted).
type RevokeTokenRequest struct {
	Header
	Tenant string `msgpack:"t"`
	ID     string `msgpack:"id"`
}

// ListTokensResponse lists a tenant's tokens (administrator only), in ID
// order, without secrets.
type ListTokensResponse struct {
	Tokens []TokenInfo `msgpack:"tk"`
}
