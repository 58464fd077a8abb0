package namespace

import (
	"github.com/lockcell/lockcell/api"
)

// Result is the outcome of one command of a slot. Exactly one of Reply and
// Err is set. A command with Err changed nothing; Changes and Freed are then
// empty.
type Result struct {
	// Reply is the command's reply, one of the *…Reply types named by each
	// operation's doc.
	Reply Reply
	// Err is the command's failure.
	Err *api.Error
	// Changes are the node changes the command made, in the order it made
	// them, for events and cache invalidation.
	Changes []NodeChange
	// Freed lists locks that went from held to free (by release, session end
	// or deletion of the node), in the order freed, so the master can wake
	// waiters. A lock that one of the command's grants took again in the
	// same command is not listed: it did not end free.
	Freed []FreedLock
	// Handed holds the outcomes of the command's grants (Release.Then,
	// CloseSession.Then, ExpireSession.Then), one per grant in order, when the command
	// succeeded; nil when it failed (no grant was tried). The grants'
	// changes are part of Changes.
	Handed []Handed
}

// Handed is the outcome of one Grant. If Tried is false the grant's lock
// was not freed by its command and nothing was tried; otherwise exactly
// one of Reply and Err is set, as for the Acquire it stands for.
type Handed struct {
	Tried bool
	Reply *Granted
	Err   *api.Error
}

// Reply is a successful command's reply: *SessionCreated, *SessionEnded,
// *Opened, *Written, *Deleted, *ACLSet, *Granted, *Released, *TenantReply,
// *TokenIssued or *TokenRevoked.
type Reply interface{ isReply() }

// SessionCreated replies to CreateSession.
type SessionCreated struct {
	Session uint64
	// Owner is the principal the new session belongs to (the command's
	// caller), so that whoever applies the command learns it from the
	// result instead of decoding the command again.
	Owner Caller
}

// SessionEnded replies to CloseSession and ExpireSession.
type SessionEnded struct {
	Session uint64
	// Released lists the locks the session held, in path order, with the
	// generation each held.
	Released []api.LockInfo
	// DeletedEphemerals lists the session's ephemeral nodes that were
	// deleted, in path order.
	DeletedEphemerals []string
}

// Opened replies to Open.
type Opened struct {
	Stat api.NodeStat
	// Created reports that the node was created by this command.
	Created bool
}

// Written replies to SetContents.
type Written struct {
	Stat api.NodeStat
}

// Deleted replies to Delete.
type Deleted struct {
	// Instance is the deleted node's instance.
	Instance uint64
}

// ACLSet replies to SetACL.
type ACLSet struct {
	Stat api.NodeStat
}

// Granted replies to a granted Acquire with everything a sequencer needs
// (the cell adds its own name and signature).
type Granted struct {
	Tenant     string
	Path       string
	Mode       api.LockMode
	Generation uint64
	Instance   uint64
}

// Released replies to Release.
type Released struct {
	// Freed reports that the lock became free (no holder left).
	Freed bool
}

// TenantReply replies to CreateTenant and UpdateTenant.
type TenantReply struct {
	Tenant api.TenantInfo
}

func (*SessionCreated) isReply() {}
func (*SessionEnded) isReply()   {}
func (*Opened) isReply()         {}
func (*Written) isReply()        {}
func (*Deleted) isReply()        {}
func (*ACLSet) isReply()         {}
func (*Granted) isReply()        {}
func (*Released) isReply()       {}
func (*TenantReply) isReply()    {}

// ChangeKind says what happened to a node.
type ChangeKind uint8

// The node changes.
const (
	// ChangeCreated: the node was created.
	ChangeCreated ChangeKind = 1 + iota
	// ChangeContents: the file's contents were written.
	ChangeContents
	// ChangeDeleted: the node was deleted.
	ChangeDeleted
	// ChangeChildAdded: a child was created in the directory; Child names it.
	ChangeChildAdded
	// ChangeChildRemoved: a child was deleted from the directory; Child
	// names it.
	ChangeChildRemoved
	// ChangeACL: the node's ACL names changed.
	ChangeACL
	// ChangeLockAcquired: the lock went from free to held.
	ChangeLockAcquired
)

// String returns the change's name, for example "contents".
func (k ChangeKind) String() string {
	switch k {
	case ChangeCreated:
		return "created"
	case ChangeContents:
		return "contents"
	case ChangeDeleted:
		return "deleted"
	case ChangeChildAdded:
		return "child-added"
	case ChangeChildRemoved:
		return "child-removed"
	case ChangeACL:
		return "acl"
	case ChangeLockAcquired:
		return "lock-acquired"
	}
	return "change(?)"
}

// NodeChange is one change to one node.
type NodeChange struct {
	Kind ChangeKind
	// Path is the node that changed (the directory, for child changes).
	Path string
	// Child is the added or removed child's name, for child changes.
	Child string
	// Instance is the node's instance (the changed directory's, for child
	// changes).
	Instance uint64
}

// FreedLock is a lock that became free.
type FreedLock struct {
	Path     string
	Instance uint64
	// Generation is the generation that was held.
	Generation uint64
	// DelayUntil, if not zero, is when the lock's lock-delay ends; nobody may
	// acquire it before.
	DelayUntil int64
	// NodeDeleted reports that the node itself is gone (an ephemeral node
	// deleted at its owner's session end); waiters should see NotFound.
	NodeDeleted bool
}
