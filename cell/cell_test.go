package cell_test

import (
	"bytes"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/sequencer"
)

// TestRoundTrip: session, create, contents, acquire, sequencer check,
// release — through a five-replica cell over QUIC with real fsync, in
// process on the simulated network (celltest under synctest).
func TestRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc := simCell(t, 5, nil)
		ctx := testCtx(t, 30*time.Second)
		c := newTestClient(t, lc, "t", "alice")
		c.createSession(ctx)

		h := c.mustOpen(ctx, "/t/file")
		if _, err := c.setContents(ctx, h, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		got, err := c.getContents(ctx, h)
		if err != nil || !bytes.Equal(got.Contents, []byte("hello")) {
			t.Fatalf("GetContents = %q, %v; want hello", got.Contents, err)
		}

		grant, err := c.acquire(ctx, h, api.LockExclusive, false)
		if err != nil {
			t.Fatal(err)
		}
		seq, err := sequencer.Parse(grant.Sequencer)
		if err != nil {
			t.Fatal(err)
		}
		if seq.Path != "/t/file" || seq.Cell != "test" || seq.Generation != grant.Generation || seq.Generation == 0 {
			t.Fatalf("sequencer %+v does not describe the grant (gen %d)", seq, grant.Generation)
		}
		if !seq.Verify(lc.PublicKey()) {
			t.Fatal("the sequencer's signature does not verify with the cell's public key")
		}
		if chk, err := c.checkSequencer(ctx, grant.Sequencer); err != nil || !chk.Valid {
			t.Fatalf("CheckSequencer while held = %+v, %v; want valid", chk, err)
		}

		// A second session cannot take it.
		c2 := newTestClient(t, lc, "t", "bob")
		c2.createSession(ctx)
		h2 := c2.mustOpen(ctx, "/t/file")
		if _, err := c2.acquire(ctx, h2, api.LockExclusive, false); !errors.Is(err, api.ErrLocked) {
			t.Fatalf("second acquire: %v; want Locked", err)
		}

		// A stale release (wrong generation) frees nothing.
		if err := c.release(ctx, h, grant.Generation+1); err == nil {
			t.Fatal("release of a generation not held succeeded")
		}
		if chk, _ := c.checkSequencer(ctx, grant.Sequencer); !chk.Valid {
			t.Fatal("a stale release freed the lock")
		}
		if err := c.release(ctx, h, grant.Generation); err != nil {
			t.Fatal(err)
		}
		if chk, err := c.checkSequencer(ctx, grant.Sequencer); err != nil || chk.Valid {
			t.Fatalf("CheckSequencer after release = %+v, %v; want invalid", chk, err)
		}
		// A forged sequencer (higher generation, signature kept) is refused.
		seq.Generation++
		forged, _ := seq.Marshal()
		if chk, err := c.checkSequencer(ctx, forged); err != nil || chk.Valid {
			t.Fatalf("forged sequencer: %+v, %v; want invalid", chk, err)
		}
		// After the release, the other session gets it with a higher generation.
		g2, err := c2.acquire(ctx, h2, api.LockExclusive, false)
		if err != nil || g2.Generation <= grant.Generation {
			t.Fatalf("acquire after release: gen %d, %v; want > %d", g2.Generation, err, grant.Generation)
		}
	})
}

// TestUnauthenticatedRefused: a client without a certificate gets
// Unauthenticated and changes nothing.
func TestUnauthenticatedRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc := simCell(t, 3, nil)
		ctx := testCtx(t, 20*time.Second)
		c := newTestClient(t, lc, "t", "alice")
		c.cert.Certificate = nil
		var resp api.CreateSessionResponse
		err := c.call(ctx, api.MethodCreateSession, &api.CreateSessionRequest{}, &resp, false)
		if !errors.Is(err, api.ErrUnauthenticated) {
			t.Fatalf("CreateSession without credentials: %v; want Unauthenticated", err)
		}
	})
}
