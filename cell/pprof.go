package cell

import (
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strings"
)

// loopbackOnly is whom /debug/pprof serves when Config.PprofAllow is empty:
// an operator logged in on the replica's own machine.
var loopbackOnly = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// pprofHandler serves the Go runtime's profiles (net/http/pprof) under
// /debug/pprof/ to requests whose TCP peer address lies in allow (loopback
// when allow is empty) and refuses every other request with 403 Forbidden.
// A profile reveals the process's code, command line and load, and a CPU
// profile or trace costs the replica CPU while it runs: it is for the
// operator, not for whoever can reach the metrics port. The peer address is
// the connection's own, never a forwarding header.
func pprofHandler(allow []netip.Prefix) http.Handler {
	if len(allow) == 0 {
		allow = loopbackOnly
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !operatorAddr(req.RemoteAddr, allow) {
			http.Error(w, "forbidden: /debug/pprof serves only the operator's addresses (pprof_allow; loopback if unset)", http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, req)
	})
}

// operatorAddr reports whether remote ("host:port", as net/http gives it)
// is an address in allow. An address it cannot parse is not.
func operatorAddr(remote string, allow []netip.Prefix) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	host, _, _ = strings.Cut(host, "%") // an IPv6 zone plays no part
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
