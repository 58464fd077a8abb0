package main

import "testing"

func TestCollapseRepeats(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"transport: transport: x", "transport: x"},
		{"transport: connection closed: transport: connection closed: eof", "transport: connection closed: eof"},
		{"a: b: c", "a: b: c"},
		{"acquire /t/x: locked: locked: held", "acquire /t/x: locked: held"},
		{"", ""},
	} {
		if got := collapseRepeats(tc.in); got != tc.want {
			t.Errorf("collapseRepeats(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
