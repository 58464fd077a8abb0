package api

import "testing"

// TestMethodTable: every method has exactly one entry in the method table,
// with a known admission class, and nothing else has one.
func TestMethodTable(t *testing.T) {
	entries := map[Method]int{}
	for _, mi := range Methods() {
		entries[mi.Method]++
		if !mi.Method.Valid() {
			t.Errorf("the table has an entry for the unknown method %s", mi.Method)
		}
		if mi.Admission < 1 || mi.Admission >= numAdmissions {
			t.Errorf("%s: unknown admission class %s", mi.Method, mi.Admission)
		}
		if mi.Idempotency > PerRequest {
			t.Errorf("%s: unknown idempotency %d", mi.Method, mi.Idempotency)
		}
	}
	checked := 0
	for m := Method(1); m < numMethods; m++ {
		checked++
		if n := entries[m]; n != 1 {
			t.Errorf("%s has %d entries in the method table, want exactly 1", m, n)
			continue
		}
		mi, ok := m.Info()
		if !ok || mi.Method != m {
			t.Errorf("%s.Info() = %+v, %v", m, mi, ok)
		}
	}
	if checked < 27 {
		t.Fatalf("checked %d methods, want at least 27 (the methods up to KeepAliveStream)", checked)
	}
	if _, ok := numMethods.Info(); ok {
		t.Errorf("Info of the unknown method %s reports an entry", numMethods)
	}
}

// TestRetryable: Retryable follows the entry's idempotency, and for a
// PerRequest method the request.
func TestRetryable(t *testing.T) {
	info := func(m Method) MethodInfo {
		mi, ok := m.Info()
		if !ok {
			t.Fatalf("%s has no entry", m)
		}
		return mi
	}
	cases := []struct {
		m    Method
		req  any
		want bool
	}{
		{MethodGetStat, &HandleRequest{}, true},
		{MethodSetContents, &SetContentsRequest{}, false},
		{MethodOpen, &OpenRequest{Create: true}, true},
		{MethodOpen, &OpenRequest{MustCreate: true}, false},
		// A PerRequest method with a request that does not say is not
		// repeated.
		{MethodOpen, &HandleRequest{}, false},
	}
	for _, c := range cases {
		if got := info(c.m).Retryable(c.req); got != c.want {
			t.Errorf("%s.Retryable(%T %+v) = %v, want %v", c.m, c.req, c.req, got, c.want)
		}
	}
	// Every read may be repeated: it changes nothing.
	for _, mi := range Methods() {
		if mi.Admission == AdmitTenantRead && mi.Idempotency != Idempotent {
			t.Errorf("%s is a tenant read but not idempotent", mi.Method)
		}
	}
}
