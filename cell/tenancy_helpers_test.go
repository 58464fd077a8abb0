package cell_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
)

// actor is one principal in the tenancy tests: a connection with a
// certificate, a token, or no credentials at all, and (if it may have one)
// a session of its own.
type actor struct {
	name  string
	tc    *testClient
	token string
	sess  uint64
	epoch uint64
	ack   uint64
	// borrowed: sess is another principal's session (the actor has none).
	borrowed bool
	// tenant and principal of a certificate actor.
	tenant, principal string
}

// hasOwnSession reports whether the actor has a session of its own.
func (a *actor) hasOwnSession() bool { return a.sess != 0 && !a.borrowed }

// certActor connects with a certificate of tenant/principal
// (cell.AdminTenant for the administrator).
func certActor(t testing.TB, lc testCell, name, tenant, principal string) *actor {
	return &actor{name: name, tc: newTestClient(t, lc, tenant, principal), tenant: tenant, principal: principal}
}

// tokenActor connects without a certificate and presents token ("" for an
// unauthenticated caller).
func tokenActor(t testing.TB, lc testCell, name, token string) *actor {
	tc := newTestClient(t, lc, "t", "nobody")
	tc.cert.Certificate = nil
	tc.cert.PrivateKey = nil
	return &actor{name: name, tc: tc, token: token}
}

func (a *actor) hdr() api.Header { return api.Header{Session: a.sess, Epoch: a.epoch, Token: a.token} }

// call makes one RPC, following fail-overs (NotMaster, lost connections).
func (a *actor) call(ctx context.Context, m api.Method, req, resp any) error {
	return a.tc.call(ctx, m, req, resp, true)
}

// newSession opens a session for the actor; it reports whether it could.
func (a *actor) newSession(ctx context.Context) error {
	var resp api.CreateSessionResponse
	if err := a.call(ctx, api.MethodCreateSession, &api.CreateSessionRequest{Token: a.token}, &resp); err != nil {
		return err
	}
	a.sess, a.epoch, a.ack = resp.Session, resp.Epoch, 0
	return nil
}

// keepAlive makes one KeepAlive bounded by d and returns its events (none
// if the master parked it for all of d).
func (a *actor) keepAlive(ctx context.Context, d time.Duration) ([]api.Event, error) {
	kctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var resp api.KeepAliveResponse
	err := a.tc.callOnce(kctx, api.MethodKeepAlive, &api.KeepAliveRequest{Header: a.hdr(), Ack: a.ack}, &resp)
	if err != nil {
		if kctx.Err() != nil && ctx.Err() == nil {
			// Parked for all of d: no events. The aborted stream closed
			// the connection; the next call redials.
			_ = a.tc.dial(ctx)
			return nil, nil
		}
		return nil, err
	}
	if resp.Epoch != a.epoch {
		a.ack = 0
		a.epoch = resp.Epoch
	}
	var out []api.Event
	for _, ev := range resp.Events {
		if ev.Seq > a.ack {
			a.ack = ev.Seq
			out = append(out, ev)
		}
	}
	return out, nil
}

func (a *actor) open(ctx context.Context, req api.OpenRequest) (api.OpenResponse, error) {
	req.Header = a.hdr()
	var resp api.OpenResponse
	err := a.call(ctx, api.MethodOpen, &req, &resp)
	return resp, err
}

func (a *actor) mustOpen(t testing.TB, ctx context.Context, req api.OpenRequest) api.Handle {
	t.Helper()
	resp, err := a.open(ctx, req)
	if err != nil {
		t.Fatalf("%s: Open %s: %v", a.name, req.Path, err)
	}
	return resp.Handle
}

func (a *actor) setContents(ctx context.Context, h api.Handle, data []byte) error {
	return a.call(ctx, api.MethodSetContents, &api.SetContentsRequest{Header: a.hdr(), Handle: h, Contents: data}, &api.StatResponse{})
}

// adminCall makes an administrator RPC and fails the test on error.
func adminCall(t testing.TB, ctx context.Context, admin *actor, m api.Method, req, resp any) {
	t.Helper()
	if err := admin.call(ctx, m, req, resp); err != nil {
		t.Fatalf("admin %s: %v", m, err)
	}
}

// issueToken issues a token for tenant/principal as the administrator.
func issueToken(t testing.TB, ctx context.Context, admin *actor, tenant, principal string) api.IssueTokenResponse {
	t.Helper()
	var resp api.IssueTokenResponse
	adminCall(t, ctx, admin, api.MethodIssueToken, &api.IssueTokenRequest{Tenant: tenant, Principal: principal}, &resp)
	return resp
}

// codeOf names an outcome for the matrix: "ok" or the error code.
func codeOf(err error) string {
	if err == nil {
		return "ok"
	}
	if errors.Is(err, errNone) {
		return "nothing"
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Code.String()
	}
	return "err"
}

// httpGet fetches url and returns its body.
func httpGet(t testing.TB, ctx context.Context, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// metricSum adds up the samples of metric name whose labels contain every
// one of want (`tenant="b"`, ...) in a Prometheus text exposition.
func metricSum(body, name string, want ...string) float64 {
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for _, w := range want {
			if !strings.Contains(line, w) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		var v float64
		for _, c := range line[i+1:] {
			if c < '0' || c > '9' {
				break
			}
			v = v*10 + float64(c-'0')
		}
		sum += v
	}
	return sum
}
