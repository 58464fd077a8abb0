package cell

import (
	"net/netip"
	"testing"
)

// TestOperatorAddr: the pprof guard admits exactly the peer addresses in
// its allow list (IPv4-mapped IPv6 and zones included) and nothing it
// cannot parse.
func TestOperatorAddr(t *testing.T) {
	ten := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct {
		remote string
		allow  []netip.Prefix
		want   bool
	}{
		{"127.0.0.1:5000", loopbackOnly, true},
		{"127.9.9.9:5000", loopbackOnly, true},
		{"[::1]:5000", loopbackOnly, true},
		{"[::ffff:127.0.0.1]:5000", loopbackOnly, true},
		{"10.1.2.3:5000", loopbackOnly, false},
		{"[fe80::1%eth0]:5000", loopbackOnly, false},
		{"10.1.2.3:5000", ten, true},
		{"[::ffff:10.1.2.3]:5000", ten, true},
		{"127.0.0.1:5000", ten, false},
		{"11.0.0.1:5000", ten, false},
		{"", loopbackOnly, false},
		{"127.0.0.1", loopbackOnly, false},
		{"localhost:80", loopbackOnly, false},
		{"[::1]:5000", nil, false},
	} {
		if got := operatorAddr(tc.remote, tc.allow); got != tc.want {
			t.Errorf("operatorAddr(%q, %v) = %v, want %v", tc.remote, tc.allow, got, tc.want)
		}
	}
}
