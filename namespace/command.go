package namespace

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/wire"
)

// Caller is who issued a command or a read, as the master authenticated it.
// A tenant principal has a non-empty Tenant; the cell administrator is
// Caller{Tenant: "", Principal: Config.AdminPrincipal} (by default "admin").
// The cell issues ExpireSession as the administrator.
type Caller struct {
	Principal string `msgpack:"p"`
	Tenant    string `msgpack:"t"`
}

// Command is one state-machine command: an operation wrapped in the
// envelope the master stamps. Apply uses no time but Time.
type Command struct {
	// Time is the master-stamped time, unix nanoseconds. It is the only time
	// apply ever uses (creation and modification stamps, lock-delay), and
	// apply uses it as max(Time, the state's clock), so the time in the
	// state never goes backwards (Store.Clock). It must not be negative.
	Time int64
	// Caller is the authenticated issuer; apply checks ACLs against it.
	Caller Caller
	// Op is the operation: one of *CreateSession, *CloseSession,
	// *ExpireSession, *OpenNode, *SetContents, *Delete, *SetACL, *Acquire,
	// *Release, *CreateTenant, *UpdateTenant, *IssueToken, *RevokeToken.
	Op Op
}

// OpKind tags an operation in the encoding. Numbers are stable.
type OpKind uint8

// The operation kinds.
const (
	KindCreateSession OpKind = 1 + iota
	KindCloseSession
	KindExpireSession
	KindOpen
	KindSetContents
	KindDelete
	KindSetACL
	KindAcquire
	KindRelease
	KindCreateTenant
	KindUpdateTenant
	KindIssueToken
	KindRevokeToken
	numKinds // keep last
)

var kindNames = [...]string{
	KindCreateSession: "create-session",
	KindCloseSession:  "close-session",
	KindExpireSession: "expire-session",
	KindOpen:          "open",
	KindSetContents:   "set-contents",
	KindDelete:        "delete",
	KindSetACL:        "set-acl",
	KindAcquire:       "acquire",
	KindRelease:       "release",
	KindCreateTenant:  "create-tenant",
	KindUpdateTenant:  "update-tenant",
	KindIssueToken:    "issue-token",
	KindRevokeToken:   "revoke-token",
}

// String returns the kind's name, for example "acquire".
func (k OpKind) String() string {
	if k >= 1 && k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Op is one state-machine operation. The implementations are the pointer
// types listed at Command.Op; the interface is closed.
type Op interface {
	// Kind returns the operation's tag.
	Kind() OpKind
	isOp()
}

// CreateSession opens a session for the caller's principal in the caller's
// tenant. Reply: *SessionCreated with a new ID, never reused. Errors:
// Unauthenticated, PermissionDenied (the administrator has no sessions),
// ResourceExhausted (max_sessions).
type CreateSession struct{}

// CloseSession ends a session on its owner's request: its locks are released
// (no lock-delay) and its ephemeral nodes deleted, in the same slot. Caller:
// the session's principal or the administrator. Reply: *SessionEnded.
// Errors: SessionExpired (no such session), PermissionDenied.
//
// Then hands the freed locks over to their next holders in the same slot
// (see Grant), as ExpireSession.Then does.
type CloseSession struct {
	Session uint64  `msgpack:"s"`
	Then    []Grant `msgpack:"h,omitempty"`
}

// ExpireSession ends a session whose lease ran out, as decided by the
// master: like CloseSession, but every lock freed this way enters its
// lock-delay. Caller: the administrator (the cell). Reply: *SessionEnded.
//
// Then hands the freed locks over to their next holders in the same slot
// (see Grant): each is tried, in order, once the session has ended.
type ExpireSession struct {
	Session uint64  `msgpack:"s"`
	Then    []Grant `msgpack:"h,omitempty"`
}

// OpenNode opens, and optionally creates, a node. Reply: *Opened.
//
// Session, if not zero, must be a live session of the caller; it is required
// for an ephemeral node, which it owns. Without Create a missing node is an
// error; with Exclusive (which requires Create) an existing one is
// (AlreadyExists). The remaining fields apply only when the node is created:
// Dir makes a directory (no contents, not ephemeral); Contents are the
// initial contents of a file; ACL, if nil, is inherited from the parent;
// LockDelay is in nanoseconds, 0 meaning Config.DefaultLockDelay and
// NoLockDelay meaning none. Opening an existing node needs read permission;
// creating one needs write permission on the parent directory.
type OpenNode struct {
	Session   uint64        `msgpack:"s,omitempty"`
	Path      string        `msgpack:"p"`
	Create    bool          `msgpack:"c,omitempty"`
	Exclusive bool          `msgpack:"x,omitempty"`
	Dir       bool          `msgpack:"d,omitempty"`
	Ephemeral bool          `msgpack:"e,omitempty"`
	Contents  []byte        `msgpack:"b,omitempty"`
	ACL       *api.ACLNames `msgpack:"a,omitempty"`
	LockDelay int64         `msgpack:"l,omitempty"`
}

// SetContents replaces a file's contents. If IfGeneration is not zero the
// write happens only if the content generation equals it (compare-and-set;
// generations start at 1). Needs write permission. Reply: *Written.
type SetContents struct {
	Session      uint64 `msgpack:"s,omitempty"`
	Path         string `msgpack:"p"`
	Contents     []byte `msgpack:"b,omitempty"`
	IfGeneration uint64 `msgpack:"g,omitempty"`
}

// Delete removes a node with no children whose lock is free; a tenant root
// cannot be deleted. If IfInstance is not zero the node's instance must
// equal it. Needs write permission on the node. Reply: *Deleted.
type Delete struct {
	Session    uint64 `msgpack:"s,omitempty"`
	Path       string `msgpack:"p"`
	IfInstance uint64 `msgpack:"i,omitempty"`
}

// SetACL replaces a node's ACL names. If IfGeneration is not zero the change
// happens only if the ACL generation equals it. Needs change-ACL permission.
// Reply: *ACLSet.
type SetACL struct {
	Session      uint64       `msgpack:"s,omitempty"`
	Path         string       `msgpack:"p"`
	ACL          api.ACLNames `msgpack:"a"`
	IfGeneration uint64       `msgpack:"g,omitempty"`
}

// Acquire takes a node's lock for Session (required, a live session of the
// caller) in Mode. Needs write permission. Reply: *Granted, which carries
// everything a sequencer needs. Errors: Locked (conflicting holder),
// LockDelay (free but in lock-delay; Error.Until), FailedPrecondition (the
// session already holds it), ResourceExhausted (max_locks).
type Acquire struct {
	Session uint64       `msgpack:"s"`
	Path    string       `msgpack:"p"`
	Mode    api.LockMode `msgpack:"m"`
}

// Release gives up Session's hold on a node's lock. Generation must name the
// lock generation being released, so a stale release never frees a newer
// grant. No ACL check for the holder: it may always let go. A session that
// does not hold the lock gets FailedPrecondition if its caller may read the
// node, else PermissionDenied (the refusal does not reveal that the node
// exists). Reply: *Released.
//
// Then, if not empty, holds Grants of the same Path only (InvalidArgument
// otherwise, and nothing changes): the lock's next holder, or a run of
// shared holders, tried in order in the same slot once the release has
// freed the lock (see Grant).
type Release struct {
	Session    uint64  `msgpack:"s"`
	Path       string  `msgpack:"p"`
	Generation uint64  `msgpack:"g"`
	Then       []Grant `msgpack:"h,omitempty"`
}

// Grant is an Acquire that rides on the command that frees its lock
// (Release.Then, CloseSession.Then, ExpireSession.Then), so that a contended lock passes from
// its holder to the head of its queue in one Paxos slot instead of two.
//
// It is applied after the command's own operation succeeded, and only if
// that operation freed the lock at Path (the lock went from held to free
// and its node still exists): then it is exactly the Acquire{Session, Path,
// Mode} that Caller would have proposed next, checked and applied as one
// (ACL, session, lock-delay, quota), at the same time. Otherwise it is not
// tried and changes nothing. Several grants of one lock are tried in
// order, each as its own Acquire: the first to succeed takes the freed
// lock with a generation greater than any before, and a shared grant
// behind a shared one joins it at that generation, as it would have in a
// slot of its own (a master hands a run of shared waiters over this way);
// an exclusive grant behind a granted one meets the lock held (Locked).
// Its outcome is reported in Result.Handed, never in the command's Err:
// the freeing stands whether or not the grant succeeds.
type Grant struct {
	Caller  Caller       `msgpack:"c"`
	Session uint64       `msgpack:"s"`
	Path    string       `msgpack:"p"`
	Mode    api.LockMode `msgpack:"m"`
}

// CreateTenant creates a tenant and its root directory "/<Name>" with the
// given root ACL names (empty: open to the tenant's principals). Caller: the
// administrator. Reply: *TenantReply.
type CreateTenant struct {
	Name  string          `msgpack:"n"`
	Quota api.TenantQuota `msgpack:"q"`
	ACL   api.ACLNames    `msgpack:"a"`
}

// UpdateTenant replaces a tenant's quota. A quota below current usage is
// accepted and stops further growth. Caller: the administrator. Reply:
// *TenantReply.
type UpdateTenant struct {
	Name  string          `msgpack:"n"`
	Quota api.TenantQuota `msgpack:"q"`
}

// Kind implements Op.
func (*CreateSession) Kind() OpKind { return KindCreateSession }

// Kind implements Op.
func (*CloseSession) Kind() OpKind { return KindCloseSession }

// Kind implements Op.
func (*ExpireSession) Kind() OpKind { return KindExpireSession }

// Kind implements Op.
func (*OpenNode) Kind() OpKind { return KindOpen }

// Kind implements Op.
func (*SetContents) Kind() OpKind { return KindSetContents }

// Kind implements Op.
func (*Delete) Kind() OpKind { return KindDelete }

// Kind implements Op.
func (*SetACL) Kind() OpKind { return KindSetACL }

// Kind implements Op.
func (*Acquire) Kind() OpKind { return KindAcquire }

// Kind implements Op.
func (*Release) Kind() OpKind { return KindRelease }

// Kind implements Op.
func (*CreateTenant) Kind() OpKind { return KindCreateTenant }

// Kind implements Op.
func (*UpdateTenant) Kind() OpKind { return KindUpdateTenant }

func (*CreateSession) isOp() {}
func (*CloseSession) isOp()  {}
func (*ExpireSession) isOp() {}
func (*OpenNode) isOp()      {}
func (*SetContents) isOp()   {}
func (*Delete) isOp()        {}
func (*SetACL) isOp()        {}
func (*Acquire) isOp()       {}
func (*Release) isOp()       {}
func (*CreateTenant) isOp()  {}
func (*UpdateTenant) isOp()  {}

// newOp returns a new zero operation of kind k, or nil for an unknown kind.
func newOp(k OpKind) Op {
	if k == 0 || k >= numKinds {
		return nil
	}
	return opCodecs[k].new()
}

// CommandVersion is the command encoding version EncodeCommand writes.
const CommandVersion = 1

// MaxEncodedCommand bounds what DecodeCommand reads: contents at the hard
// limit plus room for the rest. Store.ApplySlot applies the tighter
// Config.MaxCommandSize.
const MaxEncodedCommand = MaxContentsLimit + commandOverhead

// wireCommand is the encoded envelope: version, kind, time, caller, and the
// operation as a nested msgpack value decoded by kind. It, marshal and
// unmarshalStrict define the format through the msgpack library; the codec
// in cmdcodec.go is tested against them and is what the package runs.
type wireCommand struct {
	V uint8              `msgpack:"v"`
	K OpKind             `msgpack:"k"`
	T int64              `msgpack:"t"`
	C Caller             `msgpack:"c"`
	O msgpack.RawMessage `msgpack:"o"`
}

// EncodeCommand encodes c (msgpack, version- and kind-tagged). It fails,
// with an error wrapping ErrBadCommand, only for a nil Op.
//
// The bytes are what github.com/vmihailenco/msgpack/v5 writes for
// wireCommand with compact integers; cmdcodec.go writes them directly.
func EncodeCommand(c Command) ([]byte, error) {
	if c.Op == nil || isNilOp(c.Op) {
		return nil, fmt.Errorf("%w: nil op", ErrBadCommand)
	}
	// Most commands fit the stack buffer, and are copied out at their exact
	// size; a larger one is written again into a buffer sized once.
	var stack [512]byte
	if enc := appendCommand(stack[:0], c); len(enc) <= len(stack) {
		return append([]byte(nil), enc...), nil
	}
	return appendCommand(make([]byte, 0, commandSizeHint(c)), c), nil
}

func isNilOp(op Op) bool {
	switch o := op.(type) {
	case *CreateSession:
		return o == nil
	case *CloseSession:
		return o == nil
	case *ExpireSession:
		return o == nil
	case *OpenNode:
		return o == nil
	case *SetContents:
		return o == nil
	case *Delete:
		return o == nil
	case *SetACL:
		return o == nil
	case *Acquire:
		return o == nil
	case *Release:
		return o == nil
	case *CreateTenant:
		return o == nil
	case *UpdateTenant:
		return o == nil
	case *IssueToken:
		return o == nil
	case *RevokeToken:
		return o == nil
	}
	return true
}

// DecodeCommand decodes what EncodeCommand wrote, and only that: the
// encoding is canonical, so DecodeCommand(b) succeeding implies
// EncodeCommand of the result returns b. Any defect — garbage, truncation,
// trailing bytes, unknown version, kind or field, wrong or overflowing
// types, a non-canonical encoding, more than MaxEncodedCommand bytes — gives
// an error wrapping ErrBadCommand; it never panics. A defect inside the
// bytes also wraps a *wire.Error (internal/wire) that names the field and
// its byte offset, and wire.ErrNonCanonical when the bytes decode but are
// not the one encoding of what they hold. DecodeCommand checks the encoding
// only: the operation's arguments (paths, modes, sizes) are checked when it
// is applied.
func DecodeCommand(b []byte) (Command, error) {
	if len(b) > MaxEncodedCommand {
		return Command{}, fmt.Errorf("%w: %d bytes, more than %d", ErrBadCommand, len(b), MaxEncodedCommand)
	}
	cmd, err := readCommand(b)
	if err != nil {
		if !errors.Is(err, errMsg) {
			err = fmt.Errorf("%w: %w", errMsg, err)
		}
		return Command{}, fmt.Errorf("%w: %w", ErrBadCommand, err)
	}
	// Accept exactly what EncodeCommand writes: this rejects integers that
	// a lenient reader would silently truncate into narrower fields,
	// duplicate or reordered keys, and padded integers, so one command has
	// one encoding.
	// A command of a lock or session fits the buffer on the stack, so the
	// check allocates nothing.
	var stack [512]byte
	if err := wire.Canonical(b, appendCommand(stack[:0], cmd), "command"); err != nil {
		return Command{}, fmt.Errorf("%w: %w: %w", ErrBadCommand, errMsg, err)
	}
	return cmd, nil
}

// unmarshalStrict decodes exactly one msgpack value filling all of b, into
// v, refusing unknown fields.
func unmarshalStrict(b []byte, v any) error {
	r := bytes.NewReader(b)
	dec := msgpack.NewDecoder(r)
	dec.DisallowUnknownFields(true)
	if err := dec.Decode(v); err != nil {
		return err
	}
	if r.Len() != 0 {
		return errors.New("trailing bytes")
	}
	return nil
}

// marshal encodes v with compact integers, so equal values give equal bytes
// whatever their Go integer types.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
