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
// The package imports only the standard library so that protected servers can
// depend on it cheaply.
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
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
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
	b := make([]byte, 0, s.encodedLen())
	b = s.appendBody(b)
	b = binary.AppendUvarint(b, uint64(len(s.Signature)))
	return append(b, s.Signature...), nil
}

// SignedBytes returns the canonical bytes the cell signs: a fixed
// domain-separation prefix followed by the binary form without the signature
// field. It fails, wrapping ErrInvalid, if a field is out of range.
func (s Sequencer) SignedBytes() ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(signContext)+s.encodedLen())
	b = append(b, signContext...)
	return s.appendBody(b), nil
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
	return 1 + 3*binary.MaxVarintLen64 + len(s.Cell) + len(s.Tenant) + len(s.Path) + 1 +
		3*binary.MaxVarintLen64 + len(s.Signature)
}

func (s Sequencer) appendBody(b []byte) []byte {
	b = append(b, Version)
	b = appendString(b, s.Cell)
	b = appendString(b, s.Tenant)
	b = appendString(b, s.Path)
	b = append(b, byte(s.Mode))
	b = binary.AppendUvarint(b, s.Generation)
	return binary.AppendUvarint(b, s.Instance)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Parse decodes the binary form. It never panics; on any defect it returns an
// error wrapping ErrMalformed (or ErrVersion for an unknown version byte).
// The returned Signature does not alias b.
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
	d := decoder{b: b, off: 1}
	var s Sequencer
	s.Cell = d.string("cell", MaxCellLen)
	s.Tenant = d.string("tenant", MaxTenantLen)
	s.Path = d.string("path", MaxPathLen)
	s.Mode = Mode(d.byte("mode"))
	s.Generation = d.uvarint("generation")
	s.Instance = d.uvarint("instance")
	if sig := d.bytes("signature", MaxSignatureLen); len(sig) > 0 {
		s.Signature = append([]byte(nil), sig...)
	}
	if d.err != nil {
		return Sequencer{}, d.err
	}
	if d.off != len(b) {
		return Sequencer{}, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(b)-d.off)
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

// decoder reads fields, remembering the first error; later reads return zero
// values.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(field, why string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s: %s", ErrMalformed, field, why)
	}
}

func (d *decoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail(field, "bad varint")
		return 0
	}
	// Canonical: the minimal encoding only (no trailing 0x80 0x00 padding).
	if n != varintLen(v) {
		d.fail(field, "non-minimal varint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) byte(field string) byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail(field, "truncated")
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

func (d *decoder) bytes(field string, max int) []byte {
	n := d.uvarint(field + " length")
	if d.err != nil {
		return nil
	}
	if n > uint64(max) {
		d.fail(field, fmt.Sprintf("length %d over %d", n, max))
		return nil
	}
	if uint64(len(d.b)-d.off) < n {
		d.fail(field, "truncated")
		return nil
	}
	v := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return v
}

func (d *decoder) string(field string, max int) string {
	return string(d.bytes(field, max))
}

func varintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
