package api

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestIsMatchesByCode(t *testing.T) {
	err := fmt.Errorf("open: %w", Errorf(NotFound, "/a/b: no such node"))
	if !errors.Is(err, ErrNotFound) {
		t.Fatal("wrapped not-found error does not match ErrNotFound")
	}
	if errors.Is(err, ErrPermissionDenied) {
		t.Fatal("not-found matches permission denied")
	}
	if errors.Is(errors.New("not found"), ErrNotFound) {
		t.Fatal("a plain error matches")
	}
	var nilErr *Error
	if nilErr.Is(ErrNotFound) {
		t.Fatal("nil *Error matches")
	}
}

func TestEverySentinelDistinct(t *testing.T) {
	sentinels := []*Error{ErrInvalidArgument, ErrNotFound, ErrAlreadyExists, ErrPermissionDenied, ErrUnauthenticated,
		ErrResourceExhausted, ErrFailedPrecondition, ErrLocked, ErrLockDelay, ErrAborted, ErrNotMaster, ErrFailover,
		ErrSessionExpired, ErrUnavailable, ErrCanceled, ErrDeadlineExceeded, ErrInternal, ErrTooLarge}
	if len(sentinels) != int(numCodes)-1 {
		t.Fatalf("%d sentinels for %d codes", len(sentinels), numCodes-1)
	}
	for i, a := range sentinels {
		if !a.Code.Valid() || a.Code == OK || a.Code.String() == "" {
			t.Fatalf("sentinel %d has code %v", i, a.Code)
		}
		for j, b := range sentinels {
			if (i == j) != errors.Is(a, b) {
				t.Fatalf("Is(%v, %v) = %v", a.Code, b.Code, errors.Is(a, b))
			}
		}
	}
	if Code(999).Valid() || Code(999).String() != "code(999)" {
		t.Fatal("unknown code")
	}
}

func TestWireRoundTrip(t *testing.T) {
	in := &Error{Code: LockDelay, Msg: "lock /a/l is in lock-delay", Until: 1234}
	b, err := msgpack.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Error
	if err := msgpack.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out != *in || !errors.Is(&out, ErrLockDelay) {
		t.Fatalf("%+v", out)
	}
	if got := LockDelayError("/a/l", 5).Error(); got != "lockcell: lock delay: lock /a/l is in lock-delay (until 1970-01-01T00:00:00.000000005Z)" {
		t.Fatalf("%q", got)
	}
	if CodeOf(nil) != OK || CodeOf(errors.New("x")) != Internal || CodeOf(fmt.Errorf("w: %w", ErrLocked)) != Locked {
		t.Fatal("CodeOf")
	}
	if q := QuotaError("t", "max_nodes", 3); q.Code != ResourceExhausted || q.Msg != `tenant "t": quota max_nodes (3) exceeded` {
		t.Fatalf("%+v", q)
	}
}

func TestEnumsNamed(t *testing.T) {
	if LockExclusive.String() != "exclusive" || LockShared.String() != "shared" || LockNone.String() != "none" || LockMode(9).String() != "mode(9)" {
		t.Fatal("LockMode names")
	}
	if PermRead.String() != "read" || PermWrite.String() != "write" || PermChangeACL.String() != "change-acl" || Perm(0).String() != "perm(0)" {
		t.Fatal("Perm names")
	}
}
