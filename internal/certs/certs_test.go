package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/url"
	"strings"
	"testing"
	"testing/quick"
	"time"
)

func TestIssueAndVerify(t *testing.T) {
	for _, kt := range []KeyType{ECDSAP256, Ed25519} {
		ca, err := NewCA("cell-a", Options{KeyType: kt})
		if err != nil {
			t.Fatal(err)
		}
		rc, err := ca.IssueReplica(3, Options{KeyType: kt, DNSNames: []string{"r3.example"}})
		if err != nil {
			t.Fatal(err)
		}
		cc, err := ca.IssueClient(ClientID{Tenant: "acme", Principal: "alice@acme.io"}, Options{KeyType: kt})
		if err != nil {
			t.Fatal(err)
		}
		// Chains: replica certificates serve and dial; client ones only dial.
		for _, c := range []struct {
			cert  tls.Certificate
			usage x509.ExtKeyUsage
			ok    bool
		}{
			{rc, x509.ExtKeyUsageServerAuth, true},
			{rc, x509.ExtKeyUsageClientAuth, true},
			{cc, x509.ExtKeyUsageClientAuth, true},
			{cc, x509.ExtKeyUsageServerAuth, false},
		} {
			_, err := c.cert.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{c.usage}})
			if (err == nil) != c.ok {
				t.Errorf("key type %d, %v usage %v: %v", kt, c.cert.Leaf.Subject, c.usage, err)
			}
		}
		if id, err := ReplicaID(rc.Leaf); err != nil || id != 3 {
			t.Fatalf("ReplicaID = %d, %v", id, err)
		}
		if _, err := ClientIdentity(rc.Leaf); !errors.Is(err, ErrNoIdentity) {
			t.Fatalf("ClientIdentity of a replica certificate: %v", err)
		}
		if c, err := ClientIdentity(cc.Leaf); err != nil || c != (ClientID{"acme", "alice@acme.io"}) {
			t.Fatalf("ClientIdentity = %v, %v", c, err)
		}
		if _, err := ReplicaID(cc.Leaf); !errors.Is(err, ErrNoIdentity) {
			t.Fatalf("ReplicaID of a client certificate: %v", err)
		}
		// Another CA's certificates do not verify.
		other, _ := NewCA("cell-b", Options{})
		if _, err := rc.Leaf.Verify(x509.VerifyOptions{Roots: other.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			t.Fatal("a foreign CA verified the certificate")
		}
	}
}

func TestPEMRoundTrip(t *testing.T) {
	ca, err := NewCA("c", Options{KeyType: Ed25519})
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	ca2, err := LoadCA(ca.CertPEM(), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := ca2.IssueReplica(1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, leafKey, err := EncodeKeyPair(rc)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, leafKey)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := PoolFromPEM(ca.CertPEM())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatal(err)
	}
	// A mismatched key, a leaf as CA, and garbage are refused.
	other, _ := NewCA("o", Options{})
	otherKey, _ := other.KeyPEM()
	if _, err := LoadCA(ca.CertPEM(), otherKey); !errors.Is(err, ErrBadPEM) {
		t.Fatalf("mismatched key: %v", err)
	}
	if _, err := LoadCA(certPEM, leafKey); !errors.Is(err, ErrBadPEM) {
		t.Fatalf("leaf as CA: %v", err)
	}
	if _, err := LoadCA([]byte("junk"), keyPEM); !errors.Is(err, ErrBadPEM) {
		t.Fatalf("junk: %v", err)
	}
	if _, err := PoolFromPEM([]byte("junk")); !errors.Is(err, ErrBadPEM) {
		t.Fatalf("junk pool: %v", err)
	}
}

func TestValidity(t *testing.T) {
	at := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	ca, err := NewCA("c", Options{Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.NotBefore.Equal(at.Add(-time.Hour)) {
		t.Fatalf("NotBefore %v", ca.Cert.NotBefore)
	}
	rc, err := ca.IssueReplica(1, Options{NotBefore: at, Validity: 100 * 365 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if rc.Leaf.NotAfter.After(ca.Cert.NotAfter) {
		t.Fatalf("leaf outlives its CA: %v > %v", rc.Leaf.NotAfter, ca.Cert.NotAfter)
	}
}

func TestBadNames(t *testing.T) {
	ca, _ := NewCA("c", Options{})
	if _, err := ca.IssueReplica(0, Options{}); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("replica 0: %v", err)
	}
	for _, c := range []ClientID{
		{"", "p"}, {"t", ""}, {".", "p"}, {"t", ".."}, {"a/b", "p"}, {"t", "p q"},
		{"t", "p%41"}, {strings.Repeat("x", 129), "p"}, {"t", "é"},
	} {
		if _, err := ca.IssueClient(c, Options{}); !errors.Is(err, ErrInvalidName) {
			t.Errorf("%q: %v", c, err)
		}
	}
}

func TestParseURIStrict(t *testing.T) {
	bad := []string{
		"lockcell://replica/0", "lockcell://replica/03", "lockcell://replica/-1", "lockcell://replica/1/2",
		"lockcell://replica/", "lockcell://replica/18446744073709551616", "lockcell://replica/1?x=1",
		"lockcell://replica/1#f", "lockcell://u@replica/1", "lockcell://replica:1/1", "lockcell://other/1",
		"lockcell://tenant/t/principal/", "lockcell://tenant/t/p/x", "lockcell://tenant/t/principal/p/q",
		"lockcell://tenant/t%2Fu/principal/p", "lockcell:opaque",
	}
	for _, s := range bad {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if _, ok, err := parseURI(u); !ok || !errors.Is(err, ErrInvalidName) {
			t.Errorf("%s: ok=%v err=%v", s, ok, err)
		}
	}
	u, _ := url.Parse("spiffe://example.org/x")
	if _, ok, err := parseURI(u); ok || err != nil {
		t.Fatalf("foreign scheme: ok=%v err=%v", ok, err)
	}
}

// TestIdentityRoundTrip: every valid identity survives URI formatting,
// string parsing and identity parsing unchanged.
func TestIdentityRoundTrip(t *testing.T) {
	replica := func(id uint64) bool {
		if id == 0 {
			return true
		}
		u, err := url.Parse(ReplicaURI(id).String())
		if err != nil {
			return false
		}
		got, ok, err := parseURI(u)
		return ok && err == nil && got.replica == id
	}
	if err := quick.Check(replica, nil); err != nil {
		t.Fatal(err)
	}
	const alphabet = "abcXYZ019._@+-"
	client := func(a, b []byte) bool {
		name := func(raw []byte) string {
			var sb strings.Builder
			for _, c := range raw {
				sb.WriteByte(alphabet[int(c)%len(alphabet)])
			}
			return sb.String()
		}
		c := ClientID{Tenant: name(a), Principal: name(b)}
		u, err := ClientURI(c)
		if ValidName(c.Tenant) != nil || ValidName(c.Principal) != nil {
			return errors.Is(err, ErrInvalidName)
		}
		if err != nil {
			return false
		}
		pu, err := url.Parse(u.String())
		if err != nil {
			return false
		}
		got, ok, err := parseURI(pu)
		return ok && err == nil && got.client == c
	}
	if err := quick.Check(client, nil); err != nil {
		t.Fatal(err)
	}
}

func TestAmbiguousIdentity(t *testing.T) {
	ca, _ := NewCA("c", Options{})
	rc, _ := ca.IssueReplica(1, Options{})
	leaf := *rc.Leaf
	cu, _ := ClientURI(ClientID{"t", "p"})
	leaf.URIs = append(leaf.URIs, cu)
	if _, err := ReplicaID(&leaf); !errors.Is(err, ErrAmbiguousIdentity) {
		t.Fatalf("two identities: %v", err)
	}
	leaf.URIs = nil
	if _, err := ReplicaID(&leaf); !errors.Is(err, ErrNoIdentity) {
		t.Fatalf("no identity: %v", err)
	}
}
