package cell

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"strings"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/transport"
)

// Authentication.
//
// A caller proves its principal in one of two ways:
//
//   - A client certificate issued by the cell CA, verified by the transport
//     in the TLS handshake (transport.Identity). The certificate
//     AdminTenant/P acts as the tenant-less principal P; P =
//     Config.AdminPrincipal administers the cell.
//   - A tenant token, for a client without a certificate. The administrator
//     issues it (IssueToken) for one principal of one tenant. The token is
//     "lct1_<id>_<secret>": id (16 hex digits) names it, secret is 256
//     random bits. The replicated state keeps only the id, the tenant and
//     principal, and SHA-256 over a domain tag, the id and the secret — the
//     secret itself exists only in the IssueToken reply — so a token holds
//     across fail-over and restart, and a copy of the Paxos log or a
//     snapshot does not reveal it. RevokeToken deletes the record.
//
// Each RPC is its own QUIC stream, and a token client has no certificate to
// bind its streams, so a token client sends its token on every request
// (api.Header.Token; CreateSessionRequest.Token and CellStatusRequest.Token
// for the two calls without a header) and every call is authenticated
// afresh. A session is bound to the principal that created it: a call
// naming a session must come from the same principal, whichever credential
// it uses. Session IDs are sequential and so guessable; they are never a
// credential. Revocation therefore takes effect at once: the next call
// with a revoked token, whatever it is — a KeepAlive included — fails with
// Unauthenticated, and in addition the master expires every session that
// was created or used with the token (locks released with lock-delay,
// ephemeral nodes deleted), so a revoked principal's locks do not linger
// for a lease. A master that took over after the revocation learns the
// token binding of a session from its next call, which fails.
//
// A request with both a certificate and a token is refused
// (InvalidArgument): one credential, one principal. A request with neither
// gets Unauthenticated and nothing else, for every method (CellStatus
// included); an undecodable request from an anonymous client is also
// answered Unauthenticated.

const (
	tokenPrefix    = "lct1_"
	tokenIDBytes   = 8
	tokenSecretLen = 32
	tokenHashTag   = "lockcell tenant token v1\x00"
)

// credentialed is implemented by every request type: api.Header (embedded)
// and the two requests without a header.
type credentialed interface{ Credential() string }

// errBadToken is the one answer to every token that does not authenticate:
// unknown, revoked, malformed or wrong secret are not told apart.
var errBadToken = apiErr(api.Unauthenticated, "the token is not valid (malformed, unknown or revoked)")

// newToken generates a token for the record id; it returns the token and
// the hash to store.
func newToken() (token, id string, hash []byte, err error) {
	var idb [tokenIDBytes]byte
	var secret [tokenSecretLen]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return "", "", nil, err
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return "", "", nil, err
	}
	id = hex.EncodeToString(idb[:])
	s := base64.RawURLEncoding.EncodeToString(secret[:])
	return tokenPrefix + id + "_" + s, id, tokenHash(id, s), nil
}

// tokenHash is what the replicated state stores for a token.
func tokenHash(id, secret string) []byte {
	h := sha256.New()
	h.Write([]byte(tokenHashTag))
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(secret))
	return h.Sum(nil)
}

// parseToken splits a token into its id and secret.
func parseToken(tok string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	if !ok {
		return "", "", false
	}
	id, secret, ok = strings.Cut(rest, "_")
	if !ok || len(id) != 2*tokenIDBytes || len(secret) != base64.RawURLEncoding.EncodedLen(tokenSecretLen) {
		return "", "", false
	}
	if _, err := hex.DecodeString(id); err != nil || strings.ToLower(id) != id {
		return "", "", false
	}
	if b, err := base64.RawURLEncoding.DecodeString(secret); err != nil || len(b) != tokenSecretLen {
		return "", "", false
	}
	return id, secret, true
}

// validTokenID reports whether id has the form newToken gives it.
func validTokenID(id string) bool {
	if len(id) != 2*tokenIDBytes || strings.ToLower(id) != id {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// verifyToken authenticates a token against the applied state.
func verifyToken(state appliedState, tok string) (namespace.Caller, string, error) {
	id, secret, ok := parseToken(tok)
	if !ok {
		return namespace.Caller{}, "", errBadToken
	}
	rec, found, err := state.TokenByID(id)
	if err != nil {
		return namespace.Caller{}, "", apiErr(api.Unavailable, "reading the token store failed; retry")
	}
	if !found || subtle.ConstantTimeCompare(rec.Hash, tokenHash(id, secret)) != 1 {
		return namespace.Caller{}, "", errBadToken
	}
	return namespace.Caller{Tenant: rec.Tenant, Principal: rec.Principal}, id, nil
}

// authenticate sets c.caller from the connection's certificate or the
// request's token.
func (c *rpcCall) authenticate(req any) error {
	var tok string
	if cr, ok := req.(credentialed); ok {
		tok = cr.Credential()
	}
	switch {
	case !c.id.Anonymous() && tok != "":
		return errInvalid("present either a client certificate or a token, not both")
	case !c.id.Anonymous():
		c.caller = callerOf(c.id)
		if c.caller.Principal == "" {
			return apiErr(api.Unauthenticated, "the client certificate names no principal")
		}
		return nil
	case tok == "":
		return errNoCredentials
	}
	caller, id, err := verifyToken(c.d.state, tok)
	if err != nil {
		if c.d.serving() == nil {
			// A replica that is not master may lag behind a token's
			// issue: only the master's answer is definitive. Point the
			// client there (a non-master serves nothing but CellStatus).
			return c.d.notMaster()
		}
		return err
	}
	c.caller, c.tokenID = caller, id
	return nil
}

var errNoCredentials = apiErr(api.Unauthenticated, "no credentials: present a client certificate issued by the cell CA or a tenant token")

// callerOf maps a verified certificate identity to the namespace caller:
// AdminTenant/P is the tenant-less principal P.
func callerOf(id transport.Identity) namespace.Caller {
	if id.Tenant == AdminTenant {
		return namespace.Caller{Principal: id.Principal}
	}
	return namespace.Caller{Tenant: id.Tenant, Principal: id.Principal}
}
