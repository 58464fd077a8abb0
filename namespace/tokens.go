package namespace

import (
	"bytes"
	"encoding/hex"

	"github.com/lockcell/lockcell/api"
)

// Tenant tokens.
//
// A tenant token authenticates a principal of a tenant like a client
// certificate does. The cell generates the token and keeps here only what
// checks it: the record nK <id> holds the tenant, the principal, a hash
// of the secret (the cell's choice, TokenHashLen bytes) and the stamped
// creation time. IssueToken and RevokeToken are the administrator's; the
// cell reads records with TokenByID to authenticate a call, and revocation
// deletes the record, so a revoked token is indistinguishable from one that
// never existed. Token records are part of the logical state: they are
// replicated, checksummed and carried by snapshots like every other record.

// TokenIDLen is the length of a token ID: lowercase hex digits.
const TokenIDLen = 16

// TokenHashLen is the length of a token's stored hash (SHA-256).
const TokenHashLen = 32

// tokenRec is the stored record of a token (key nK <id>).
type tokenRec struct {
	Tenant    string
	Principal string
	Hash      []byte
	Created   int64
}

func (r *tokenRec) info(id string) api.TokenInfo {
	return api.TokenInfo{ID: id, Tenant: r.Tenant, Principal: r.Principal, Created: r.Created}
}

// TokenRecord is a stored token as the cell needs it to authenticate a
// call.
type TokenRecord struct {
	ID        string
	Tenant    string
	Principal string
	// Hash is the stored hash of the token's secret.
	Hash    []byte
	Created int64
}

// IssueToken records a new token of Principal in Tenant. ID must be
// TokenIDLen lowercase hex digits not in use; Hash TokenHashLen bytes.
// Caller: the administrator. Reply: *TokenIssued. Errors: InvalidArgument,
// NotFound (no such tenant), AlreadyExists (the ID is taken).
type IssueToken struct {
	ID        string `msgpack:"id"`
	Tenant    string `msgpack:"t"`
	Principal string `msgpack:"p"`
	Hash      []byte `msgpack:"h"`
}

// RevokeToken deletes the token ID of Tenant. Caller: the administrator.
// Reply: *TokenRevoked. Errors: InvalidArgument, NotFound (no such token
// in the tenant).
type RevokeToken struct {
	Tenant string `msgpack:"t"`
	ID     string `msgpack:"id"`
}

// Kind implements Op.
func (*IssueToken) Kind() OpKind { return KindIssueToken }

// Kind implements Op.
func (*RevokeToken) Kind() OpKind { return KindRevokeToken }

func (*IssueToken) isOp()  {}
func (*RevokeToken) isOp() {}

// TokenIssued replies to IssueToken.
type TokenIssued struct {
	Info api.TokenInfo
}

// TokenRevoked replies to RevokeToken with the revoked token.
type TokenRevoked struct {
	Info api.TokenInfo
}

func (*TokenIssued) isReply()  {}
func (*TokenRevoked) isReply() {}

// validTokenID checks id's form.
func validTokenID(id string) *api.Error {
	if len(id) != TokenIDLen {
		return api.Errorf(api.InvalidArgument, "token ID must be %d hex digits", TokenIDLen)
	}
	if _, err := hex.DecodeString(id); err != nil || id != string(bytes.ToLower([]byte(id))) {
		return api.Errorf(api.InvalidArgument, "token ID %q is not lowercase hex", trunc(id))
	}
	return nil
}

func tokenKey(id string) []byte {
	k := tagKey(tagToken, len(id))
	return append(k, id...)
}

func (v *view) token(id string) (*tokenRec, error) {
	var r tokenRec
	ok, err := v.getRec(tokenKey(id), &r)
	if err != nil || !ok {
		return nil, err
	}
	return &r, nil
}

func (a *applier) issueToken(op *IssueToken) (Reply, *api.Error, error) {
	if aerr, err := a.checkAdmin(); aerr != nil || err != nil {
		return nil, aerr, err
	}
	if aerr := validTokenID(op.ID); aerr != nil {
		return nil, aerr, nil
	}
	if err := ValidTenantName(op.Tenant); err != nil {
		return nil, err.(*api.Error), nil
	}
	if err := ValidPrincipal(op.Principal); err != nil {
		return nil, api.Errorf(api.InvalidArgument, "token principal: %s", err.(*api.Error).Msg), nil
	}
	if len(op.Hash) != TokenHashLen {
		return nil, api.Errorf(api.InvalidArgument, "token hash must be %d bytes", TokenHashLen), nil
	}
	t, err := a.tenant(op.Tenant)
	if err != nil {
		return nil, nil, err
	}
	if t == nil {
		return nil, api.Errorf(api.NotFound, "tenant %q does not exist", op.Tenant), nil
	}
	old, err := a.token(op.ID)
	if err != nil {
		return nil, nil, err
	}
	if old != nil {
		return nil, api.Errorf(api.AlreadyExists, "token %s exists", op.ID), nil
	}

	// Writes from here on.
	rec := &tokenRec{Tenant: op.Tenant, Principal: op.Principal, Hash: bytes.Clone(op.Hash), Created: a.now}
	if err := a.set(tokenKey(op.ID), encodeRec(rec)); err != nil {
		return nil, nil, err
	}
	return &TokenIssued{Info: rec.info(op.ID)}, nil, nil
}

func (a *applier) revokeToken(op *RevokeToken) (Reply, *api.Error, error) {
	if aerr, err := a.checkAdmin(); aerr != nil || err != nil {
		return nil, aerr, err
	}
	if aerr := validTokenID(op.ID); aerr != nil {
		return nil, aerr, nil
	}
	rec, err := a.token(op.ID)
	if err != nil {
		return nil, nil, err
	}
	if rec == nil || rec.Tenant != op.Tenant {
		return nil, api.Errorf(api.NotFound, "tenant %q has no token %s", trunc(op.Tenant), op.ID), nil
	}
	if err := a.del(tokenKey(op.ID)); err != nil {
		return nil, nil, err
	}
	return &TokenRevoked{Info: rec.info(op.ID)}, nil, nil
}

// TokenByID returns the token record id, for the cell to authenticate a
// call that carries the token; found is false for a token that does not
// exist (never issued, or revoked). It checks no caller: the cell calls it
// before it knows who the caller is.
func (s *Store) TokenByID(id string) (rec TokenRecord, found bool, err error) {
	if validTokenID(id) != nil {
		return TokenRecord{}, false, nil
	}
	err = s.reading(func(v *view) error {
		r, err := v.token(id)
		if err != nil || r == nil {
			return err
		}
		rec, found = TokenRecord{ID: id, Tenant: r.Tenant, Principal: r.Principal, Hash: bytes.Clone(r.Hash), Created: r.Created}, true
		return nil
	})
	return rec, found, err
}

// ListTokens returns tenant's tokens in ID order, without hashes. Only the
// administrator may call it.
func (s *Store) ListTokens(c Caller, tenant string) ([]api.TokenInfo, error) {
	var out []api.TokenInfo
	err := s.reading(func(v *view) error {
		admin, aerr, err := v.checkCaller(c)
		if aerr != nil || err != nil {
			return errOr(aerr, err)
		}
		if !admin {
			return api.Errorf(api.PermissionDenied, "only the administrator lists tokens")
		}
		if tenant == "" {
			return api.Errorf(api.InvalidArgument, "a tenant is required")
		}
		if err := v.tenantReader(c, tenant); err != nil {
			return err
		}
		prefix := tagKey(tagToken, 0)
		return v.scan(prefix, nil, func(k, val []byte) (bool, error) {
			var r tokenRec
			if err := decodeRec(k, val, &r); err != nil {
				return false, err
			}
			if r.Tenant == tenant {
				out = append(out, r.info(string(k[len(prefix):])))
			}
			return true, nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
