package client

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/certs"
	"github.com/lockcell/lockcell/transport"
)

// Why Dial fails, told apart. Dial keeps trying while a master may still
// turn up; when it has not found one within Config.DialPatience it asks
// every replica at once (probe) and, if none is master, returns the error
// the answers point to instead of waiting out its context:
//
//   - a certificate refused on either side: ErrCertificate;
//   - credentials refused: ErrUnauthenticated (it also matches
//     api.ErrUnauthenticated);
//   - replicas answered but none is master (no quorum): ErrNoMaster;
//   - no replica answered: ErrUnreachable.
//
// A cell electing a master is not an error: as long as some replica names
// one, Dial goes on until its context ends.

// replicaAnswer is what probing one replica found.
type replicaAnswer struct {
	addr    string
	replica uint64 // the id its certificate proved; 0 if the handshake failed
	status  *api.CellStatusResponse
	err     error
}

// probe asks every replica for its status in parallel, each within ctx.
func (c *Client) probe(ctx context.Context) []replicaAnswer {
	out := make([]replicaAnswer, len(c.cfg.Addrs))
	var wg sync.WaitGroup
	for i, addr := range c.cfg.Addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = c.probeOne(ctx, addr)
		}()
	}
	wg.Wait()
	return out
}

func (c *Client) probeOne(ctx context.Context, addr string) replicaAnswer {
	a := replicaAnswer{addr: addr}
	cc, err := transport.Dial(ctx, transport.DialConfig{
		Addrs: []string{addr}, CA: c.cfg.CA, Certificate: c.cfg.Certificate,
		HandshakeTimeout: c.cfg.HandshakeTimeout, IdleTimeout: c.cfg.IdleTimeout, Logger: c.log,
	})
	if err != nil {
		a.err = err
		return a
	}
	defer cc.Close()
	a.replica = cc.ReplicaID()
	f, err := cc.Call(ctx, uint16(api.MethodCellStatus), &api.CellStatusRequest{Token: c.cfg.Token})
	if err != nil {
		a.err = err
		return a
	}
	switch f.Tag {
	case api.ReplyOK:
		var st api.CellStatusResponse
		if err := f.Decode(&st); err != nil {
			a.err = err
			return a
		}
		a.status = &st
	case api.ReplyError:
		ae := &api.Error{}
		if err := f.Decode(ae); err != nil {
			a.err = err
			return a
		}
		a.err = ae
	default:
		a.err = fmt.Errorf("unexpected reply tag %#x", f.Tag)
	}
	return a
}

// diagnose turns the answers into the error that explains why there is no
// master to dial, or nil if some replica names a master (or a replica
// answered in a way this does not explain: keep trying). Only a replica
// that says it is master itself counts: a follower may name a master that
// is gone.
func (c *Client) diagnose(answers []replicaAnswer, patience time.Duration) error {
	var answered, silent, refusedCert, badCert, badAddrs []string
	var unauth error
	for _, a := range answers {
		switch {
		case a.status != nil && servesAsMaster(a.status):
			return nil
		case a.status != nil:
			d := fmt.Sprintf("replica %d (%s", a.replica, a.addr)
			if a.status.Role != "" {
				d += ", " + string(a.status.Role)
			}
			if a.status.Master != 0 && a.status.Master != a.status.Replica {
				d += fmt.Sprintf(", believes replica %d is master", a.status.Master)
			}
			answered = append(answered, d+")")
		case errors.Is(a.err, api.ErrUnauthenticated):
			unauth = a.err
		case errors.Is(a.err, transport.ErrBadCertificate):
			p := certProblem(a.err)
			if !slices.Contains(badCert, p) {
				badCert = append(badCert, p)
			}
			badAddrs = append(badAddrs, a.addr)
		case refusedOurCertificate(a.err):
			refusedCert = append(refusedCert, a.addr)
		case a.err != nil && a.replica != 0:
			answered = append(answered, fmt.Sprintf("replica %d (%s, %v)", a.replica, a.addr, a.err))
		default:
			silent = append(silent, a.addr)
		}
	}
	switch {
	case len(badCert) > 0:
		return fmt.Errorf("%w: the certificate of %s does not verify with the configured CA (is that this cell's CA?): %s",
			ErrCertificate, strings.Join(badAddrs, ", "), strings.Join(badCert, "; "))
	case len(refusedCert) > 0:
		return fmt.Errorf("%w: %s refused the client %s (not issued by this cell's CA?)",
			ErrCertificate, strings.Join(refusedCert, ", "), c.credential())
	case unauth != nil:
		return fmt.Errorf("%w: the cell refused the client %s: %w", ErrUnauthenticated, c.credential(), unauth)
	case len(answered) > 0:
		msg := fmt.Sprintf("%s answered, none is master (no quorum: too few replicas up or connected)", strings.Join(answered, ", "))
		if len(silent) > 0 {
			msg += fmt.Sprintf("; no answer within %v from %s", patience, strings.Join(silent, ", "))
		}
		return fmt.Errorf("%w: %s", ErrNoMaster, msg)
	case len(silent) > 0:
		return fmt.Errorf("%w: no replica answered within %v (%s)", ErrUnreachable, patience, strings.Join(silent, ", "))
	}
	return nil
}

// servesAsMaster reports whether the replica that answered st says it
// serves as master. A Paxos leader that does not (yet) serve - it waits out
// an old master's lease, or has lost its quorum - reports the role
// "leader"; a replica that reports no role is taken at its word.
func servesAsMaster(st *api.CellStatusResponse) bool {
	return st.Master != 0 && st.Master == st.Replica && (st.Role == api.RoleMaster || st.Role == "")
}

// certProblem describes the verification failure inside err, naming the
// certificate's subject and issuer when it is an unknown authority.
func certProblem(err error) string {
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) && ua.Cert != nil {
		return fmt.Sprintf("it is issued by %q, which the CA does not hold", ua.Cert.Issuer.String())
	}
	var ci x509.CertificateInvalidError
	if errors.As(err, &ci) {
		return ci.Error()
	}
	var he x509.HostnameError
	if errors.As(err, &he) {
		return he.Error()
	}
	s := err.Error()
	if i := strings.LastIndex(s, transport.ErrBadCertificate.Error()); i >= 0 {
		s = s[i:]
	}
	return s
}

// refusedOurCertificate reports whether a handshake failed because the
// replica refused our certificate (a TLS alert about it).
func refusedOurCertificate(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "bad certificate") || strings.Contains(s, "unknown certificate authority") ||
		strings.Contains(s, "certificate required")
}

// credential names what this client authenticates with, without secrets.
func (c *Client) credential() string {
	if c.cfg.Token != "" {
		return "token " + tokenName(c.cfg.Token)
	}
	if c.cfg.Certificate == nil {
		return "credentials (none: no certificate and no token)"
	}
	leaf := c.cfg.Certificate.Leaf
	if leaf == nil && len(c.cfg.Certificate.Certificate) > 0 {
		leaf, _ = x509.ParseCertificate(c.cfg.Certificate.Certificate[0])
	}
	if leaf == nil {
		return "certificate"
	}
	if id, err := certs.ClientIdentity(leaf); err == nil {
		return fmt.Sprintf("certificate of %s/%s (issued by %q)", id.Tenant, id.Principal, leaf.Issuer.String())
	}
	return fmt.Sprintf("certificate %q (issued by %q)", leaf.Subject.String(), leaf.Issuer.String())
}

// tokenName returns the public part of a tenant token: the prefix and id
// of "lct1_<id>_<secret>", never the secret (which may hold '_' itself).
func tokenName(tok string) string {
	if prefix, rest, ok := strings.Cut(tok, "_"); ok {
		if id, _, ok := strings.Cut(rest, "_"); ok {
			return prefix + "_" + id
		}
	}
	if len(tok) > 8 {
		return tok[:8] + "…"
	}
	return "(malformed)"
}
