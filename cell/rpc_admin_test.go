package cell

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
)

// TestCellStatusHandlerOnDeps serves CellStatus from handlerDeps alone:
// the progress fields (chosen, applied, checksum, rebuild, each replica's
// progress and lag) reach the administrator only; a long-poll for another
// master waits through awaitOtherMaster with its wait bounded by
// api.MaxStatusWait.
func TestCellStatusHandlerOnDeps(t *testing.T) {
	status := func() *api.CellStatusResponse {
		return &api.CellStatusResponse{Cell: "c", Master: 2, Chosen: 10, Applied: 9, Checksum: 7, Rebuild: "rebuilding",
			Replicas: []api.ReplicaStatus{{ID: 1, Chosen: 10, Applied: 9, Lag: 1}, {ID: 2, Chosen: 10, Applied: 10}}}
	}
	var waited []time.Duration
	d := &handlerDeps{
		roleDeps: roleDeps{adminPrincipal: DefaultAdminPrincipal},
		admin: adminDeps{
			cellStatus: status,
			awaitOtherMaster: func(_ context.Context, except uint64, wait time.Duration) *api.CellStatusResponse {
				if except != 2 {
					t.Errorf("awaitOtherMaster asked to wait for a master other than %d, want 2", except)
				}
				waited = append(waited, wait)
				return status()
			},
		},
	}
	ctx := context.Background()
	call := func(caller namespace.Caller, req *api.CellStatusRequest) *api.CellStatusResponse {
		c := &rpcCall{d: d, method: api.MethodCellStatus, caller: caller}
		resp, err := handleCellStatus(ctx, c, req)
		if err != nil {
			t.Fatalf("CellStatus: %v", err)
		}
		return resp.(*api.CellStatusResponse)
	}
	admin := call(namespace.Caller{Principal: DefaultAdminPrincipal}, &api.CellStatusRequest{})
	if admin.Chosen != 10 || admin.Applied != 9 || admin.Checksum != 7 || admin.Rebuild == "" || admin.Replicas[0].Lag != 1 {
		t.Errorf("the administrator's CellStatus hides progress: %+v", admin)
	}
	for _, tenant := range []namespace.Caller{{Tenant: "t", Principal: "p"}, {Principal: "not-the-admin"}} {
		st := call(tenant, &api.CellStatusRequest{})
		if st.Chosen != 0 || st.Applied != 0 || st.Checksum != 0 || st.Rebuild != "" {
			t.Errorf("%+v's CellStatus shows the cell's progress: %+v", tenant, st)
		}
		for _, rs := range st.Replicas {
			if rs.Chosen != 0 || rs.Applied != 0 || rs.Lag != 0 {
				t.Errorf("%+v's CellStatus shows replica %d's progress: %+v", tenant, rs.ID, rs)
			}
		}
		if st.Master != 2 || len(st.Replicas) != 2 {
			t.Errorf("%+v's CellStatus lost the master or the replicas: %+v", tenant, st)
		}
	}
	for _, w := range []time.Duration{0, time.Second, api.MaxStatusWait + time.Second} {
		call(namespace.Caller{Tenant: "t", Principal: "p"}, &api.CellStatusRequest{Except: 2, Wait: int64(w)})
	}
	want := []time.Duration{api.MaxStatusWait, time.Second, api.MaxStatusWait}
	if len(waited) != len(want) {
		t.Fatalf("awaitOtherMaster called %d times, want %d", len(waited), len(want))
	}
	for i := range want {
		if waited[i] != want[i] {
			t.Errorf("long-poll %d waited %v, want %v", i, waited[i], want[i])
		}
	}
}

// TestStepDownHandlerOnDeps serves StepDown from handlerDeps alone: the
// reply names the leader this replica follows once it is another
// replica, else the successor it handed over to; a failed step-down is
// FailedPrecondition naming the cause.
func TestStepDownHandlerOnDeps(t *testing.T) {
	cases := []struct {
		leader, successor, want uint64
	}{
		{leader: 3, successor: 2, want: 3}, // follows the replica that took over
		{leader: 1, successor: 2, want: 2}, // still names itself: the successor
		{leader: 0, successor: 4, want: 4}, // knows no leader yet
	}
	judged := 0
	for _, tc := range cases {
		var next uint64
		d := &handlerDeps{admin: adminDeps{
			self:      1,
			stepDown:  func(_ context.Context, n uint64) error { next = n; return nil },
			leader:    func() uint64 { return tc.leader },
			successor: func() uint64 { return tc.successor },
		}}
		resp, err := handleStepDown(context.Background(), &rpcCall{d: d}, &api.StepDownRequest{Next: 5})
		if err != nil || next != 5 {
			t.Errorf("leader %d, successor %d: StepDown(5) asked for %d, answered %v", tc.leader, tc.successor, next, err)
			continue
		}
		if got := resp.(*api.StepDownResponse).Successor; got != tc.want {
			t.Errorf("leader %d, successor %d: reply names %d, want %d", tc.leader, tc.successor, got, tc.want)
			continue
		}
		judged++
	}
	d := &handlerDeps{admin: adminDeps{self: 1, stepDown: func(context.Context, uint64) error { return errors.New("no successor answers") }}}
	_, err := handleStepDown(context.Background(), &rpcCall{d: d}, &api.StepDownRequest{})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.FailedPrecondition || !strings.Contains(ae.Msg, "no successor answers") {
		t.Errorf("a failed step-down answered %v, want FailedPrecondition naming the cause", err)
	} else {
		judged++
	}
	if judged != len(cases)+1 {
		t.Fatalf("judged %d step-downs, want %d", judged, len(cases)+1)
	}
}
