package cell

import (
	"errors"
	"strings"
	"testing"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/namespace"
)

// TestEveryMethodServed: every api method has exactly one entry in the
// api table and exactly one handler here (a handler or a stream handler),
// so a replica serves it by that entry; and no handler serves a method
// the table does not know.
func TestEveryMethodServed(t *testing.T) {
	entries := map[api.Method]int{}
	for _, mi := range api.Methods() {
		entries[mi.Method]++
	}
	checked := 0
	for m := api.Method(1); m.Valid(); m++ {
		checked++
		_, h := handlers[m]
		_, sh := streamHandlers[m]
		switch {
		case entries[m] != 1:
			t.Errorf("%s has %d entries in the api method table, want exactly 1", m, entries[m])
		case h && sh:
			t.Errorf("%s has both a handler and a stream handler", m)
		case !h && !sh:
			t.Errorf("%s has no handler", m)
		}
		e, ok := endpoints[m]
		if !ok {
			t.Errorf("%s is not served (no endpoint)", m)
			continue
		}
		if want, _ := m.Info(); e.MethodInfo != want {
			t.Errorf("%s is served with %+v, the api table says %+v", m, e.MethodInfo, want)
		}
	}
	if checked < 27 {
		t.Fatalf("checked %d methods, want at least 27", checked)
	}
	for m := range handlers {
		if _, ok := m.Info(); !ok {
			t.Errorf("a handler serves %s, which the api table does not know", m)
		}
	}
	for m := range streamHandlers {
		if _, ok := m.Info(); !ok {
			t.Errorf("a stream handler serves %s, which the api table does not know", m)
		}
	}
}

// TestAdmissionByClass: admit's charge step treats every method by its
// admission class in the api table, on a master whose tenant has a budget
// of one call and one KeepAlive (its clock stands still, so no token comes
// back): a tenant read or write is charged against OpsPerSecond, a
// KeepAlive against KeepAlivesPerSecond only, a Release or CloseSession
// against nothing, and an administrator's method refuses a tenant
// principal and charges the administrator nothing.
func TestAdmissionByClass(t *testing.T) {
	const tenant = "t"
	shed := newMetrics(metricsSources{}).shed
	var serving *master
	d := &handlerDeps{roleDeps: roleDeps{
		serving:        func() *master { return serving },
		adminPrincipal: DefaultAdminPrincipal,
	}}
	fresh := func() *limiter {
		now := monotime.Now()
		return newLimiter(limiterDeps{
			quota: func(string) (api.TenantQuota, bool) {
				return api.TenantQuota{OpsPerSecond: 1, KeepAlivesPerSecond: 1}, true
			},
			shed: shed,
			now:  func() monotime.Time { return now },
		})
	}
	call := func(mi api.MethodInfo, caller namespace.Caller) error {
		c := &rpcCall{d: d, method: mi.Method, info: mi, caller: caller}
		return c.charge()
	}
	user := namespace.Caller{Tenant: tenant, Principal: "p"}
	admin := namespace.Caller{Principal: DefaultAdminPrincipal}
	quotaRefusal := func(err error, quota string) bool {
		var ae *api.Error
		return errors.As(err, &ae) && ae.Code == api.ResourceExhausted && strings.Contains(ae.Msg, quota)
	}
	judged := map[api.Admission]int{}
	for _, mi := range api.Methods() {
		serving = &master{lim: fresh()}
		var errs []error
		for range 3 {
			errs = append(errs, call(mi, user))
		}
		switch mi.Admission {
		case api.AdmitTenantRead, api.AdmitTenantWrite, api.AdmitKeepAlive:
			quota := "ops_per_second"
			other := api.MethodInfo{Method: api.MethodKeepAlive, Admission: api.AdmitKeepAlive}
			if mi.Admission == api.AdmitKeepAlive {
				quota = "keepalives_per_second"
				other = api.MethodInfo{Method: api.MethodGetStat, Admission: api.AdmitTenantRead}
			}
			if errs[0] != nil || !quotaRefusal(errs[1], quota) {
				t.Errorf("%s (%s): calls answered %v; want the first admitted and the second refused for %s", mi.Method, mi.Admission, errs, quota)
				continue
			}
			// The other budget is untouched.
			if err := call(other, user); err != nil {
				t.Errorf("%s (%s) spent the budget of %s: %v", mi.Method, mi.Admission, other.Admission, err)
				continue
			}
		case api.AdmitRelease:
			if errs[0] != nil || errs[1] != nil || errs[2] != nil {
				t.Errorf("%s (%s): calls answered %v; want all admitted", mi.Method, mi.Admission, errs)
				continue
			}
		case api.AdmitAdmin:
			var ae *api.Error
			if !errors.As(errs[0], &ae) || ae.Code != api.PermissionDenied {
				t.Errorf("%s (%s) by a tenant principal: %v; want PermissionDenied", mi.Method, mi.Admission, errs[0])
				continue
			}
			for range 3 {
				if err := call(mi, admin); err != nil {
					t.Errorf("%s (%s) by the administrator: %v", mi.Method, mi.Admission, err)
				}
			}
		default:
			t.Errorf("%s: admission class %s not judged", mi.Method, mi.Admission)
			continue
		}
		judged[mi.Admission]++
	}
	for a := api.AdmitTenantRead; a <= api.AdmitAdmin; a++ {
		if judged[a] == 0 {
			t.Errorf("no method of class %s was judged", a)
		}
	}
}
