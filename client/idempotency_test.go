package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
)

// TestLostReplyRetriedOnlyIfIdempotent: a call whose first attempt loses
// its reply (the fake master answers Unavailable, "outcome unknown", which
// a client may repeat only if a repeat is harmless) is repeated exactly
// when the api method table says so. SetContents, SetACL and an Open with
// MustCreate fail with ErrOutcomeUnknown after one attempt; GetStat and an
// Open without MustCreate (PerRequest) are repeated and succeed, which
// shows that the fake's answer is one the client retries at all.
func TestLostReplyRetriedOnlyIfIdempotent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lost := &api.Error{Code: api.Unavailable, Msg: "fake master: the outcome is unknown"}
	// Each method's first call loses its reply; a repeat succeeds.
	m := startFakeMasterOpts(t, fakeLease, false, fakeOpts{script: func(meth api.Method, n int64) any {
		switch meth {
		case api.MethodGetStat, api.MethodSetContents, api.MethodSetACL:
			if n == 1 {
				return lost
			}
			return &api.StatResponse{Stat: api.NodeStat{Instance: 1}}
		case api.MethodOpen:
			// The first Open (which sets the test up) succeeds; the next
			// two are each the first attempt of a case.
			if n == 2 || n == 3 {
				return lost
			}
			return &api.OpenResponse{Handle: api.Handle{Session: 7, Path: "/t/f", Instance: 1}}
		}
		return nil
	}})
	c, err := client.Dial(ctx, m.config(t, fakeDrift, newPauseClock()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Open(ctx, "/t/f", client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		method api.Method
		call   func() error
		retry  bool
	}{
		{"SetContents", api.MethodSetContents, func() error { _, err := h.SetContents(ctx, []byte("x")); return err }, false},
		{"SetACL", api.MethodSetACL, func() error { _, err := h.SetACL(ctx, api.ACLNames{}, 0); return err }, false},
		{"Open MustCreate", api.MethodOpen, func() error {
			_, err := s.Open(ctx, "/t/f", client.OpenOptions{MustCreate: true})
			return err
		}, false},
		{"GetStat", api.MethodGetStat, func() error { _, err := h.Stat(ctx); return err }, true},
		{"Open Create", api.MethodOpen, func() error {
			_, err := s.Open(ctx, "/t/f", client.OpenOptions{Create: true})
			return err
		}, true},
	}
	judged := 0
	for _, tc := range cases {
		before := m.calls[tc.method].Load()
		err := tc.call()
		attempts := m.calls[tc.method].Load() - before
		switch {
		case tc.retry && (err != nil || attempts != 2):
			t.Errorf("%s (idempotent): %d attempts, err %v; want 2 attempts and success", tc.name, attempts, err)
		case !tc.retry && (!errors.Is(err, client.ErrOutcomeUnknown) || attempts != 1):
			t.Errorf("%s (not idempotent): %d attempts, err %v; want 1 attempt and ErrOutcomeUnknown", tc.name, attempts, err)
		default:
			judged++
		}
	}
	if judged != len(cases) {
		t.Fatalf("%d of %d cases behaved as the api method table says", judged, len(cases))
	}
}
