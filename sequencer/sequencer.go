// Package sequencer defines lockcell's fencing token, the sequencer
// (Chubby §2.4): a lock grant's identity — cell, tenant, lock path, mode,
// lock generation and node instance — plus room for the cell's signature.
//
// A client that holds a lock hands its sequencer to the servers it talks to;
// a protected server refuses a request whose sequencer is older than the newest
// it has seen for that lock, or that the cell says is no longer held. Because
// lock generations only grow (DESIGN.md invariant 4), a sequencer that stopped
// being valid never becomes valid again.
//
// The package imports only the standard library and internal/wire (itself
// standard-library only) so that protected servers can depend on it cheaply.
//
// # Encodings
//
// The binary form (Marshal, Parse) is compact and canonical: one value has
// exactly one encoding, and Parse rejects every other byte string, so
// Parse(b) succeeding implies Marshal of the result returns b. Layout,
// version 1:
//
//	version   byte = 1
//	cell      uvarint length, UTF-8 bytes (1..MaxCellLen)
//	tenant    uvarint length, UTF-8 bytes (1..MaxTenantLen)
//	path      uvarint length, UTF-8 bytes (1..MaxPathLen, starts with '/')
//	mode      byte (1 exclusive, 2 shared)
//	generation uvarint (≥ 1)
//	instance  uvarint (≥ 1)
//	signature uvarint length, bytes (0..MaxSignatureLen)
//
// The text form (String, ParseString) is the binary form in unpadded
// base64url, fit for an HTTP header. SignedBytes is what the cell signs: a
// domain-separation prefix and the binary form without the signature field.
//
// Signing and validation against the cell's keys come later (the Validator);
// Parse checks only the token's own well-formedness.
package sequencer

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/lockcell/lockcell/internal/wire"
)

// Version is the binary encoding version this package writes.
const Version byte = 1

// Field limits. Parse rejects longer fields; Marshal refuses to write them.
const (
	MaxCellLen      = 255
	MaxTenantLen    = 255
	MaxPathLen      = 4096
	MaxSignatureLen = 512
	// MaxEncodedLen bounds the binary form of any valid sequencer.
	MaxEncodedLen = 1 + 2 + MaxCellLen + 2 + MaxTenantLen + 2 + MaxPathLen + 1 + 10 + 10 + 2 + MaxSignatureLen
)

// signContext prefixes SignedBytes so a signature over a sequencer can never
// be mistaken for a signature over anything else.
const signContext = "lockcell sequencer signature v1\x00"

// Errors returned by this package. Parse errors wrap ErrMalformed (or
// ErrVersion); Marshal errors wrap ErrInvalid. Check with errors.Is.
var (
	// ErrMalformed: the bytes or text are not a well-formed sequencer.
	ErrMalformed = errors.New("sequencer: malformed")
	// ErrVersion: the encoding's version byte is not one this package reads.
	ErrVersion = errors.New("sequencer: unsupported version")
	// ErrInvalid: a field's value is out of range (empty path, unknown mode,
	// zero generation, ...).
	ErrInvalid = errors.New("sequencer: invalid field")
)

// Mode is the lock mode the sequencer was granted in. The numbers match
// api.LockMode.
type Mode uint8

const (
	// Exclusive is a writer lock.
	Exclusive Mode = 1
	// Shared is a reader lock.
	Shared Mode = 2
)

// Valid reports whether m is Exclusive or Shared.
func (m Mode) Valid() bool { return m == Exclusive || m == Shared }

// String returns "exclusive", "shared" or "mode(N)".
func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Sequencer is a fencing token for one lock grant.
type Sequencer struct {
	// Cell names the cell that granted the lock.
	Cell string
	// Tenant is the tenant whose subtree holds the lock.
	Tenant string
	// Path is the lock's node path, "/<tenant>/...".
	Path string
	// Mode is the granted mode.
	Mode Mode
	// Generation is the lock generation of the grant (≥ 1).
	Generation uint64
	// Instance is the node's instance number (≥ 1): a re-created node of the
	// same name has a different one.
	Instance uint64
	// Signature is the cell's signature over SignedBytes; empty if unsigned.
	Signature []byte
}

// Validate checks every field's range; the error wraps ErrInvalid.
func (s Sequencer) Validate() error {
	switch {
	case s.Cell == "" || len(s.Cell) > MaxCellLen || !utf8.ValidString(s.Cell):
		return fmt.Errorf("%w: cell must be 1..%d bytes of UTF-8", ErrInvalid, MaxCellLen)
	case s.Tenant == "" || len(s.Tenant) > MaxTenantLen || !utf8.ValidString(s.Tenant) || strings.IndexByte(s.Tenant, '/') >= 0:
		return fmt.Errorf("%w: tenant must be 1..%d bytes of UTF-8 without '/'", ErrInvalid, MaxTenantLen)
	case len(s.Path) < 2 || s.Path[0] != '/' || len(s.Path) > MaxPathLen || !utf8.ValidString(s.Path):
		return fmt.Errorf("%w: path must be 2..%d bytes of UTF-8 starting with '/'", ErrInvalid, MaxPathLen)
	case !strings.HasPrefix(s.Path[1:], s.Tenant) || (len(s.Path) > 1+len(s.Tenant) && s.Path[1+len(s.Tenant)] != '/'):
		return fmt.Errorf("%w: path %q is not in tenant %q", ErrInvalid, s.Path, s.Tenant)
	case !s.Mode.Valid():
		return fmt.Errorf("%w: mode %d", ErrInvalid, uint8(s.Mode))
	case s.Generation == 0:
		return fmt.Errorf("%w: generation 0", ErrInvalid)
	case s.Instance == 0:
		return fmt.Errorf("%w: instance 0", ErrInvalid)
	case len(s.Signature) > MaxSignatureLen:
		return fmt.Errorf("%w: signature longer than %d bytes", ErrInvalid, MaxSignatureLen)
	}
	return nil
}

// Marshal returns the binary form. It fails, wrapping ErrInvalid, if a field
// is out of range.
func (s Sequencer) Marshal() ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	w := wire.NewWriter(make([]byte, 0, s.encodedLen()))
	s.writeBody(&w)
	w.LenBytes(s.Signature)
	return w.Bytes(), nil
}

// SignedBytes returns the canonical bytes the cell signs: a fixed
// domain-separation prefix followed by the binary form without the signature
// field. It fails, wrapping ErrInvalid, if a field is out of range.
func (s Sequencer) SignedBytes() ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	w := wire.NewWriter(make([]byte, 0, len(signContext)+s.encodedLen()))
	w.RawString(signContext)
	s.writeBody(&w)
	return w.Bytes(), nil
}

// String returns the text form (unpadded base64url of Marshal). For a
// sequencer that Marshal refuses it returns "!invalid", which ParseString
// rejects.
func (s Sequencer) String() string {
	b, err := s.Marshal()
	if err != nil {
		return "!invalid"
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s Sequencer) encodedLen() int {
	return 1 + 3*wire.MaxVarintLen + len(s.Cell) + len(s.Tenant) + len(s.Path) + 1 +
		3*wire.MaxVarintLen + len(s.Signature)
}

func (s Sequencer) writeBody(w *wire.Writer) {
	w.Byte(Version)
	w.LenString(s.Cell)
	w.LenString(s.Tenant)
	w.LenString(s.Path)
	w.Byte(byte(s.Mode))
	w.Uvarint(s.Generation)
	w.Uvarint(s.Instance)
}

// Parse decodes the binary form. It never panics; on any defect it returns an
// error wrapping ErrMalformed (or ErrVersion for an unknown version byte);
// a defect in the encoding itself also wraps an *wire.Error naming the field
// and its byte offset. The returned Signature does not alias b.
func Parse(b []byte) (Sequencer, error) {
	if len(b) == 0 {
		return Sequencer{}, fmt.Errorf("%w: empty", ErrMalformed)
	}
	if len(b) > MaxEncodedLen {
		return Sequencer{}, fmt.Errorf("%w: %d bytes, more than %d", ErrMalformed, len(b), MaxEncodedLen)
	}
	if b[0] != Version {
		return Sequencer{}, fmt.Errorf("%w: %d", ErrVersion, b[0])
	}
	r := wire.NewReader(b)
	r.Byte("version")
	var s Sequencer
	s.Cell = r.LenString(MaxCellLen, "cell")
	s.Tenant = r.LenString(MaxTenantLen, "tenant")
	s.Path = r.LenString(MaxPathLen, "path")
	s.Mode = Mode(r.Byte("mode"))
	s.Generation = r.Uvarint("generation")
	s.Instance = r.Uvarint("instance")
	if sig := r.LenBytes(MaxSignatureLen, "signature"); len(sig) > 0 {
		s.Signature = append([]byte(nil), sig...)
	}
	if err := r.Done(); err != nil {
		return Sequencer{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if err := s.Validate(); err != nil {
		return Sequencer{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return s, nil
}

// ParseString decodes the text form. Errors are as for Parse.
func ParseString(text string) (Sequencer, error) {
	if len(text) > base64.RawURLEncoding.EncodedLen(MaxEncodedLen) {
		return Sequencer{}, fmt.Errorf("%w: text longer than %d", ErrMalformed, base64.RawURLEncoding.EncodedLen(MaxEncodedLen))
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(text)
	if err != nil {
		return Sequencer{}, fmt.Errorf("%w: not unpadded base64url", ErrMalformed)
	}
	return Parse(b)
}
