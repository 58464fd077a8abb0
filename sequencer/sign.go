package sequencer

import (
	"crypto/ed25519"
	"fmt"
)

// Sign returns s with Signature set to the Ed25519 signature of its signed
// bytes under key (the cell's sequencer-signing key).
func (s Sequencer) Sign(key ed25519.PrivateKey) (Sequencer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return s, fmt.Errorf("%w: signing key has %d bytes", ErrInvalid, len(key))
	}
	b, err := s.SignedBytes()
	if err != nil {
		return s, err
	}
	s.Signature = ed25519.Sign(key, b)
	return s, nil
}

// Verify reports whether s carries a valid signature by the cell whose
// public key is pub. An unsigned or malformed sequencer does not verify.
func (s Sequencer) Verify(pub ed25519.PublicKey) bool {
	if len(pub) != ed25519.PublicKeySize || len(s.Signature) != ed25519.SignatureSize {
		return false
	}
	b, err := s.SignedBytes()
	if err != nil {
		return false
	}
	return ed25519.Verify(pub, b, s.Signature)
}
