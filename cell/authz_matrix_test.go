package cell_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/transport"
)

// errNone marks a "did it reach the caller?" row that found nothing.
var errNone = errors.New("nothing received")

// TestAuthorizationMatrix runs every RPC and every secondary path as each
// kind of principal against tenant beta's nodes, sessions, locks and
// records, and checks that exactly the allowed ones succeed and that every
// refusal carries the code that names why: an authorization code where the
// row is about authorization, never some other error standing in for it.
// Columns:
//
//	owner    beta/b1 by certificate (the control: beta's own principal)
//	a-plain  alpha/a-plain by certificate, not named by any beta ACL file
//	a-grant  alpha/a-granted by certificate, named by beta's ACL files
//	a-token  alpha/a-granted by tenant token
//	revoked  beta/b1 by a token that was revoked (after it opened a session)
//	anon     no credentials at all
//	admin    the cell administrator (_cell/admin)
//
// A caller that cannot have a session of its own uses beta's (session IDs
// are guessable); one that can uses its own with self-describing handles
// naming beta's paths (handles are the caller's word). Rows that act on
// beta's lock come twice: through beta's own session (so that the holder
// check passes and only authorization can refuse) and through the caller's
// own session (where a caller that may read the node is told it does not
// hold the lock, and one that may not must learn nothing about the node).
// Run with -v to print the matrix.
func TestAuthorizationMatrix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Default leases and timings: on simulated time the matrix's
		// hundreds of calls take no time a lease would notice, and the
		// master keeps its role however loaded the machine is (a fail-over
		// would change the answers: every call naming the old epoch is
		// refused with Failover).
		lc := simCell(t, 3, nil)
		ctx := testCtx(t, 150*time.Second)
		admin := certActor(t, lc, "admin", cell.AdminTenant, "admin")
		for _, name := range []string{"alpha", "beta"} {
			adminCall(t, ctx, admin, api.MethodCreateTenant, &api.TenantRequest{Name: name}, &api.TenantResponse{})
		}
		owner := certActor(t, lc, "owner", "beta", "b1")
		if err := owner.newSession(ctx); err != nil {
			t.Fatal(err)
		}
		grantFile := []byte("b1\nalpha/a-granted\n")
		for _, p := range []string{"/beta/acl"} {
			owner.mustOpen(t, ctx, api.OpenRequest{Path: p, Create: true, Dir: true})
		}
		for _, p := range []string{"/beta/acl/r", "/beta/acl/w", "/beta/acl/a", "/beta/acl/hr"} {
			owner.mustOpen(t, ctx, api.OpenRequest{Path: p, Create: true, Contents: grantFile})
		}
		gACL := &api.ACLNames{Read: "/beta/acl/r", Write: "/beta/acl/w", ChangeACL: "/beta/acl/a"}
		hACL := &api.ACLNames{Read: "/beta/acl/hr", Write: "/beta/acl/w", ChangeACL: "/beta/acl/a"}
		owner.mustOpen(t, ctx, api.OpenRequest{Path: "/beta/g", Create: true, Dir: true, ACL: gACL})
		owner.mustOpen(t, ctx, api.OpenRequest{Path: "/beta/h", Create: true, Dir: true, ACL: hACL})
		files := map[string]api.Handle{}
		for _, p := range []string{"/beta/g/f", "/beta/g/c", "/beta/g/held", "/beta/g/lk", "/beta/h/f", "/beta/h/c"} {
			files[p] = owner.mustOpen(t, ctx, api.OpenRequest{Path: p, Create: true, Contents: []byte("secret")})
		}
		var held api.SequencerResponse
		if err := owner.call(ctx, api.MethodAcquire, &api.AcquireRequest{Header: owner.hdr(), Handle: files["/beta/g/held"], Mode: api.LockExclusive}, &held); err != nil {
			t.Fatal(err)
		}

		plain := certActor(t, lc, "a-plain", "alpha", "a-plain")
		granted := certActor(t, lc, "a-grant", "alpha", "a-granted")
		grantedTok := tokenActor(t, lc, "a-token", issueToken(t, ctx, admin, "alpha", "a-granted").Token)
		revTok := issueToken(t, ctx, admin, "beta", "b1")
		revoked := tokenActor(t, lc, "revoked", revTok.Token)
		if err := revoked.newSession(ctx); err != nil {
			t.Fatalf("the token before revocation: %v", err)
		}
		adminCall(t, ctx, admin, api.MethodRevokeToken, &api.RevokeTokenRequest{Tenant: "beta", ID: revTok.Info.ID}, &api.IssueTokenResponse{})
		anon := tokenActor(t, lc, "anon", "")
		actors := []*actor{owner, plain, granted, grantedTok, revoked, anon, admin}
		for _, a := range actors {
			owner.mustOpen(t, ctx, api.OpenRequest{Path: "/beta/g/del-" + a.name, Create: true})
		}

		// ownHandle is a's handle on path: its own session, beta's path.
		ownHandle := func(a *actor, path string, ev api.EventMask, cache bool) api.Handle {
			return api.Handle{Session: a.sess, Path: path, Instance: files[path].Instance, Events: ev, Cache: cache}
		}
		// drain acknowledges a's pending events.
		drain := func(a *actor) {
			_, _ = a.keepAlive(ctx, 100*time.Millisecond)
		}
		// ownerWrite writes path as beta's owner while a keeps its session
		// alive and acknowledges what it receives (a cache invalidation makes
		// the write wait for that); it reports whether a received an event for
		// path.
		ownerWrite := func(a *actor, path string) error {
			done := make(chan error, 1)
			go func() { done <- owner.setContents(ctx, files[path], []byte("secret")) }()
			got := false
			for {
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("owner write %s: %v", path, err)
					}
					// Events are queued before the write's reply: one more
					// poll sees any that came.
					if a.hasOwnSession() {
						evs, _ := a.keepAlive(ctx, 300*time.Millisecond)
						got = got || hasPath(evs, path)
					}
					if got {
						return nil
					}
					return errNone
				default:
				}
				if !a.hasOwnSession() {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				evs, _ := a.keepAlive(ctx, 100*time.Millisecond)
				got = got || hasPath(evs, path)
			}
		}
		// subscribe tries both ways to watch path (for events, or with cache
		// for cache invalidations only): Open (needs read) and a self-made
		// handle.
		subscribe := func(a *actor, path string, cache bool) {
			ev := api.WantContentsModified
			if cache {
				ev = 0 // only the cache registration may deliver anything
			}
			resp, err := a.open(ctx, api.OpenRequest{Path: path, Events: ev, Cache: cache})
			h := resp.Handle
			if err != nil {
				h = ownHandle(a, path, ev, cache)
			}
			var cr api.ContentsResponse
			_ = a.call(ctx, api.MethodGetContentsAndStat, &api.HandleRequest{Header: a.hdr(), Handle: h}, &cr)
		}
		withdrawGrant := func() {
			if err := owner.setContents(ctx, files["/beta/acl/hr"], []byte("b1\n")); err != nil {
				t.Fatal(err)
			}
		}
		restoreGrant := func() {
			if err := owner.setContents(ctx, files["/beta/acl/hr"], grantFile); err != nil {
				t.Fatal(err)
			}
		}
		// files["/beta/acl/hr"] was opened by the owner: its handle works.
		files["/beta/acl/hr"] = owner.mustOpen(t, ctx, api.OpenRequest{Path: "/beta/acl/hr"})

		// betaHdr is a's request header naming beta's session.
		betaHdr := func(a *actor) api.Header {
			return api.Header{Session: owner.sess, Epoch: owner.epoch, Token: a.token}
		}
		// releaseHeld asks, as a, to release beta's held lock; if that worked,
		// beta takes the lock again so later rows and columns find it held.
		releaseHeld := func(a *actor, hdr api.Header, h api.Handle) error {
			err := a.call(ctx, api.MethodRelease, &api.ReleaseRequest{Header: hdr, Handle: h, Generation: held.Generation}, &api.Empty{})
			if err == nil {
				if err := owner.call(ctx, api.MethodAcquire, &api.AcquireRequest{Header: owner.hdr(), Handle: files["/beta/g/held"], Mode: api.LockExclusive}, &held); err != nil {
					t.Fatalf("beta re-taking its lock after %s released it: %v", a.name, err)
				}
			}
			return err
		}

		type row struct {
			name string
			run  func(a *actor) error
		}
		var createSessionErr = map[*actor]error{}
		rows := []row{
			{"CellStatus", func(a *actor) error {
				return a.call(ctx, api.MethodCellStatus, &api.CellStatusRequest{Token: a.token}, &api.CellStatusResponse{})
			}},
			{"CellStatus progress details", func(a *actor) error {
				var st api.CellStatusResponse
				if err := a.call(ctx, api.MethodCellStatus, &api.CellStatusRequest{Token: a.token}, &st); err != nil {
					return err
				}
				if st.Applied == 0 && st.Checksum == 0 && st.Chosen == 0 {
					return errNone
				}
				return nil
			}},
			{"CreateSession", func(a *actor) error { return createSessionErr[a] }},
			{"KeepAlive of beta's session", func(a *actor) error {
				kctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				err := a.tc.callOnce(kctx, api.MethodKeepAlive, &api.KeepAliveRequest{Header: api.Header{Session: owner.sess, Epoch: owner.epoch, Token: a.token}, Ack: owner.ack}, &api.KeepAliveResponse{})
				if err != nil && kctx.Err() != nil {
					_ = a.tc.dial(ctx)
					return nil // accepted and parked
				}
				return err
			}},
			{"CloseSession of beta's session", func(a *actor) error {
				victim := *owner
				victim.tc = owner.tc
				if err := victim.newSession(ctx); err != nil {
					t.Fatal(err)
				}
				return a.call(ctx, api.MethodCloseSession, &api.CloseSessionRequest{Header: api.Header{Session: victim.sess, Epoch: victim.epoch, Token: a.token}}, &api.Empty{})
			}},
			{"Open existing node", func(a *actor) error {
				_, err := a.open(ctx, api.OpenRequest{Path: "/beta/g/f"})
				return err
			}},
			{"Open creating a node", func(a *actor) error {
				_, err := a.open(ctx, api.OpenRequest{Path: "/beta/g/new-" + a.name, Create: true})
				return err
			}},
			{"GetContentsAndStat", func(a *actor) error {
				return a.call(ctx, api.MethodGetContentsAndStat, &api.HandleRequest{Header: a.hdr(), Handle: ownHandle(a, "/beta/g/f", 0, false)}, &api.ContentsResponse{})
			}},
			{"GetStat", func(a *actor) error {
				return a.call(ctx, api.MethodGetStat, &api.HandleRequest{Header: a.hdr(), Handle: ownHandle(a, "/beta/g/f", 0, false)}, &api.StatResponse{})
			}},
			{"ReadDir", func(a *actor) error {
				o, err := owner.open(ctx, api.OpenRequest{Path: "/beta/g"})
				if err != nil {
					t.Fatal(err)
				}
				h := api.Handle{Session: a.sess, Path: "/beta/g", Instance: o.Stat.Instance}
				return a.call(ctx, api.MethodReadDir, &api.ReadDirRequest{Header: a.hdr(), Handle: h}, &api.ReadDirResponse{})
			}},
			{"SetContents", func(a *actor) error {
				return a.call(ctx, api.MethodSetContents, &api.SetContentsRequest{Header: a.hdr(), Handle: ownHandle(a, "/beta/g/f", 0, false), Contents: []byte("secret")}, &api.StatResponse{})
			}},
			{"SetACL", func(a *actor) error {
				return a.call(ctx, api.MethodSetACL, &api.SetACLRequest{Header: a.hdr(), Handle: ownHandle(a, "/beta/g/f", 0, false), ACL: *gACL}, &api.StatResponse{})
			}},
			{"Acquire (and Release)", func(a *actor) error {
				h := ownHandle(a, "/beta/g/lk", 0, false)
				var sr api.SequencerResponse
				if err := a.call(ctx, api.MethodAcquire, &api.AcquireRequest{Header: a.hdr(), Handle: h, Mode: api.LockExclusive}, &sr); err != nil {
					return err
				}
				return a.call(ctx, api.MethodRelease, &api.ReleaseRequest{Header: a.hdr(), Handle: h, Generation: sr.Generation}, &api.Empty{})
			}},
			{"GetSequencer of beta's lock, beta's session", func(a *actor) error {
				return a.call(ctx, api.MethodGetSequencer, &api.HandleRequest{Header: betaHdr(a), Handle: files["/beta/g/held"]}, &api.SequencerResponse{})
			}},
			{"GetSequencer of beta's lock, own session", func(a *actor) error {
				return a.call(ctx, api.MethodGetSequencer, &api.HandleRequest{Header: a.hdr(), Handle: ownHandle(a, "/beta/g/held", 0, false)}, &api.SequencerResponse{})
			}},
			{"CheckSequencer of beta's sequencer", func(a *actor) error {
				var r api.CheckSequencerResponse
				if err := a.call(ctx, api.MethodCheckSequencer, &api.CheckSequencerRequest{Header: a.hdr(), Sequencer: held.Sequencer}, &r); err != nil {
					return err
				}
				if !r.Valid {
					t.Fatalf("%s: beta's held sequencer reported invalid: %s", a.name, r.Reason)
				}
				return nil
			}},
			{"Delete", func(a *actor) error {
				p := "/beta/g/del-" + a.name
				o, err := owner.open(ctx, api.OpenRequest{Path: p})
				if err != nil {
					t.Fatal(err)
				}
				return a.call(ctx, api.MethodDelete, &api.HandleRequest{Header: a.hdr(), Handle: api.Handle{Session: a.sess, Path: p, Instance: o.Stat.Instance}}, &api.Empty{})
			}},
			{"Release of beta's lock, beta's session", func(a *actor) error {
				return releaseHeld(a, betaHdr(a), files["/beta/g/held"])
			}},
			{"Release of beta's lock, own session", func(a *actor) error {
				return releaseHeld(a, a.hdr(), ownHandle(a, "/beta/g/held", 0, false))
			}},
			{"ListSessions of beta", func(a *actor) error {
				return a.call(ctx, api.MethodListSessions, &api.ListRequest{Header: api.Header{Token: a.token}, Tenant: "beta"}, &api.ListSessionsResponse{})
			}},
			{"ListLocks of beta", func(a *actor) error {
				return a.call(ctx, api.MethodListLocks, &api.ListRequest{Header: api.Header{Token: a.token}, Tenant: "beta"}, &api.ListLocksResponse{})
			}},
			{"ListTenants shows beta", func(a *actor) error {
				var r api.ListTenantsResponse
				if err := a.call(ctx, api.MethodListTenants, &api.ListRequest{Header: api.Header{Token: a.token}}, &r); err != nil {
					return err
				}
				if !slices.ContainsFunc(r.Tenants, func(ti api.TenantInfo) bool { return ti.Name == "beta" }) {
					return errNone
				}
				return nil
			}},
			{"CreateTenant", func(a *actor) error {
				return a.call(ctx, api.MethodCreateTenant, &api.TenantRequest{Header: api.Header{Token: a.token}, Name: "new-" + a.name}, &api.TenantResponse{})
			}},
			{"UpdateTenant of beta", func(a *actor) error {
				return a.call(ctx, api.MethodUpdateTenant, &api.TenantRequest{Header: api.Header{Token: a.token}, Name: "beta"}, &api.TenantResponse{})
			}},
			{"IssueToken for beta", func(a *actor) error {
				return a.call(ctx, api.MethodIssueToken, &api.IssueTokenRequest{Header: api.Header{Token: a.token}, Tenant: "beta", Principal: "b1"}, &api.IssueTokenResponse{})
			}},
			{"ListTokens of beta", func(a *actor) error {
				return a.call(ctx, api.MethodListTokens, &api.ListRequest{Header: api.Header{Token: a.token}, Tenant: "beta"}, &api.ListTokensResponse{})
			}},
			{"RevokeToken of beta", func(a *actor) error {
				victim := issueToken(t, ctx, admin, "beta", "victim")
				return a.call(ctx, api.MethodRevokeToken, &api.RevokeTokenRequest{Header: api.Header{Token: a.token}, Tenant: "beta", ID: victim.Info.ID}, &api.IssueTokenResponse{})
			}},
			{"SaveSnapshot of the cell", func(a *actor) error {
				return a.call(ctx, api.MethodSaveSnapshot, &api.SaveSnapshotRequest{Header: api.Header{Token: a.token}}, &api.SaveSnapshotResponse{})
			}},
			{"events of beta's node reach the caller", func(a *actor) error {
				subscribe(a, "/beta/g/f", false)
				drain(a)
				return ownerWrite(a, "/beta/g/f")
			}},
			{"events after beta withdrew the grant", func(a *actor) error {
				subscribe(a, "/beta/h/f", false)
				drain(a)
				withdrawGrant()
				defer restoreGrant()
				return ownerWrite(a, "/beta/h/f")
			}},
			{"cache invalidations of beta's node", func(a *actor) error {
				subscribe(a, "/beta/g/c", true)
				drain(a)
				return ownerWrite(a, "/beta/g/c")
			}},
			{"cache invalidations after beta withdrew the grant", func(a *actor) error {
				subscribe(a, "/beta/h/c", true)
				drain(a)
				withdrawGrant()
				defer restoreGrant()
				return ownerWrite(a, "/beta/h/c")
			}},
			{"peer join (peer ALPN)", func(a *actor) error { return dialPeer(ctx, lc, &a.tc.cert) }},
		}
		cols := []*actor{plain, granted, grantedTok, revoked, anon, admin, owner} // owner last: it writes and deletes
		got := map[string]map[string]string{}
		for _, a := range cols {
			switch a {
			case owner:
				createSessionErr[a] = nil // its first call, above
			case revoked:
				// It keeps the session it opened before the revocation.
				sess, epoch := a.sess, a.epoch
				createSessionErr[a] = a.newSession(ctx)
				a.sess, a.epoch = sess, epoch
			default:
				createSessionErr[a] = a.newSession(ctx)
				if createSessionErr[a] != nil {
					// No session of its own: it tries beta's.
					a.sess, a.epoch, a.borrowed = owner.sess, owner.epoch, true
				}
			}
			got[a.name] = map[string]string{}
			for _, r := range rows {
				got[a.name][r.name] = codeOf(r.run(a))
			}
		}

		// Y: allowed. A refusal names its code: P PermissionDenied,
		// U Unauthenticated, F FailedPrecondition (not the holder, told only
		// to a caller that may read the node), - nothing reached the caller (a
		// secondary path, or details left out of an answer).
		want := map[string]string{
			//                                                 owner a-plain a-grant a-token revoked anon admin
			"CellStatus":                     "Y Y Y Y U U Y",
			"CellStatus progress details":    "- - - - U U Y",
			"CreateSession":                  "Y Y Y Y U U P",
			"KeepAlive of beta's session":    "Y P P P U U P",
			"CloseSession of beta's session": "Y P P P U U P",
			"Open existing node":             "Y P Y Y U U P",
			"Open creating a node":           "Y P Y Y U U P",
			"GetContentsAndStat":             "Y P Y Y U U P",
			"GetStat":                        "Y P Y Y U U P",
			"ReadDir":                        "Y P Y Y U U P",
			"SetContents":                    "Y P Y Y U U P",
			"SetACL":                         "Y P Y Y U U P",
			"Acquire (and Release)":          "Y P Y Y U U P",
			"GetSequencer of beta's lock, beta's session":       "Y P P P U U P",
			"GetSequencer of beta's lock, own session":          "Y P F F U U P",
			"CheckSequencer of beta's sequencer":                "Y P Y Y U U P",
			"Delete":                                            "Y P Y Y U U P",
			"Release of beta's lock, beta's session":            "Y P P P U U P",
			"Release of beta's lock, own session":               "Y P F F U U P",
			"ListSessions of beta":                              "Y P P P U U Y",
			"ListLocks of beta":                                 "Y P P P U U Y",
			"ListTenants shows beta":                            "Y - - - U U Y",
			"CreateTenant":                                      "P P P P U U Y",
			"UpdateTenant of beta":                              "P P P P U U Y",
			"IssueToken for beta":                               "P P P P U U Y",
			"ListTokens of beta":                                "P P P P U U Y",
			"RevokeToken of beta":                               "P P P P U U Y",
			"SaveSnapshot of the cell":                          "P P P P U U Y",
			"events of beta's node reach the caller":            "Y - Y Y - - -",
			"events after beta withdrew the grant":              "Y - - - - - -",
			"cache invalidations of beta's node":                "Y - Y Y - - -",
			"cache invalidations after beta withdrew the grant": "Y - - - - - -",
			"peer join (peer ALPN)":                             "P P P P P P P",
		}
		wantCode := map[string]string{
			"Y": "ok",
			"P": api.PermissionDenied.String(),
			"U": api.Unauthenticated.String(),
			"F": api.FailedPrecondition.String(),
			"-": "nothing",
		}
		order := []*actor{owner, plain, granted, grantedTok, revoked, anon, admin}
		var b strings.Builder
		fmt.Fprintf(&b, "\n%-50s", "path \\ principal")
		for _, a := range order {
			fmt.Fprintf(&b, " %-26s", a.name)
		}
		b.WriteString("\n")
		bad := 0
		for _, r := range rows {
			fmt.Fprintf(&b, "%-50s", r.name)
			exp := strings.Fields(want[r.name])
			if len(exp) != len(order) {
				t.Fatalf("row %q has no expectation", r.name)
			}
			for i, a := range order {
				res := got[a.name][r.name]
				mark := ""
				want, known := wantCode[exp[i]]
				if !known {
					t.Fatalf("row %q: unknown expectation %q", r.name, exp[i])
				}
				if res != want {
					mark = " <-- WRONG"
					bad++
					t.Errorf("%s as %s: %s; want %s", r.name, a.name, res, want)
				}
				cell := "ALLOWED"
				switch res {
				case "ok":
				case "nothing":
					cell = "denied (nothing)"
				default:
					cell = "denied (" + res + ")"
				}
				fmt.Fprintf(&b, " %-26s", cell+mark)
			}
			b.WriteString("\n")
		}
		b.WriteString("(metrics labels and the HTTP status pages: TestMetricsAndStatusRevealNoTenantData)\n")
		t.Log(b.String())
		if bad > 0 {
			t.Fatalf("%d cells of the matrix are wrong", bad)
		}
	})
}

func hasPath(evs []api.Event, path string) bool {
	return slices.ContainsFunc(evs, func(ev api.Event) bool { return ev.Path == path })
}

// dialPeer tries to join the peer mesh of the master with cert (nil or
// empty: none): the TLS handshake on the peer ALPN must refuse anything but
// a replica certificate of the cell.
func dialPeer(ctx context.Context, lc testCell, cert *tls.Certificate) error {
	addr := lc.Addrs()[0]
	if m := lc.Master(); m != nil {
		addr = m.Addr().String()
	}
	cfg := &tls.Config{NextProtos: []string{transport.ALPNPeer}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	if cert != nil && len(cert.Certificate) > 0 {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	to, err := netip.ParseAddrPort(addr)
	if err != nil {
		return err
	}
	var pc net.PacketConn
	if c, ok := lc.(*celltest.Cell); ok {
		pc, err = c.PacketConn()
	} else {
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
	}
	if err != nil {
		return err
	}
	tr := &quic.Transport{Conn: pc}
	defer func() { _ = tr.Close(); _ = pc.Close() }()
	conn, err := tr.Dial(dctx, net.UDPAddrFromAddrPort(to), cfg, &quic.Config{HandshakeIdleTimeout: 2 * time.Second})
	if err != nil {
		return apiErrPeer(err)
	}
	defer conn.CloseWithError(0, "")
	// In TLS 1.3 the client finishes its handshake before the server has
	// checked the client's certificate: a refusal arrives as a TLS alert
	// (a QUIC crypto error) right after. Anything else — an open
	// connection, or one the mesh replaced by the real peer's — means the
	// certificate was accepted.
	select {
	case <-conn.Context().Done():
		var te *quic.TransportError
		if err := context.Cause(conn.Context()); errors.As(err, &te) && te.ErrorCode.IsCryptoError() {
			return apiErrPeer(err)
		}
		return nil
	case <-time.After(2 * time.Second):
		return nil
	}
}

func apiErrPeer(err error) error {
	return &api.Error{Code: api.PermissionDenied, Msg: "peer handshake refused: " + err.Error()}
}

// TestPeerJoinControl is the positive control of the matrix's peer-join
// row: a replica certificate does get through the same dial.
func TestPeerJoinControl(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc := simCell(t, 3, nil)
		ctx := testCtx(t, 30*time.Second)
		m, err := lc.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rcfg, err := lc.Config(m.ID()%3 + 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := dialPeer(ctx, lc, &rcfg.Certificate); err != nil {
			t.Fatalf("a replica certificate was refused on the peer ALPN: %v", err)
		}
		tc, err := lc.ClientCertificate("t", "p")
		if err != nil {
			t.Fatal(err)
		}
		if err := dialPeer(ctx, lc, &tc); err == nil {
			t.Fatal("a tenant certificate joined the peer mesh")
		}
	})
}
