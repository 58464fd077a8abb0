package cell

import (
	"bytes"
	"strings"
	"testing"
)

// TestTokenFormat: a new token parses back to its ID and a secret whose
// hash is the stored one; any change of a character breaks it (wrong ID,
// wrong hash, or malformed), and malformed tokens never parse.
func TestTokenFormat(t *testing.T) {
	tok, id, hash, err := newToken()
	if err != nil {
		t.Fatal(err)
	}
	gotID, secret, ok := parseToken(tok)
	if !ok || gotID != id || !bytes.Equal(tokenHash(gotID, secret), hash) || !validTokenID(id) {
		t.Fatalf("round trip of %q: %q %q %v", tok, gotID, secret, ok)
	}
	for i := range tok {
		for _, c := range []byte{'A', '0', '_', 'z'} {
			if tok[i] == c {
				continue
			}
			mut := tok[:i] + string(c) + tok[i+1:]
			mid, msec, ok := parseToken(mut)
			if ok && mid == id && bytes.Equal(tokenHash(mid, msec), hash) {
				t.Fatalf("changing byte %d of the token to %q still authenticates", i, c)
			}
		}
	}
	for _, bad := range []string{"", "lct1_", tok + "x", tok[:len(tok)-1], strings.ToUpper(tok), "lct2" + tok[4:], strings.Replace(tok, "_", "-", 1)} {
		if _, _, ok := parseToken(bad); ok {
			t.Fatalf("malformed token %q parsed", bad)
		}
	}
	tok2, id2, _, _ := newToken()
	if tok2 == tok || id2 == id {
		t.Fatal("two tokens are equal")
	}
}
