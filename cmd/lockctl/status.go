package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
)

// statusAskTimeout bounds the question to each replica: status asks every
// replica at once, so the whole command takes about this long at most.
const statusAskTimeout = 3 * time.Second

// replicaAnswer is one replica's answer to status, or why none came.
type replicaAnswer struct {
	Addr   string                  `json:"addr"`
	Status *api.CellStatusResponse `json:"status,omitempty"`
	Err    string                  `json:"error,omitempty"`
}

func cmdStatus(e *env, args []string) int {
	fs := e.flags("status", "[--json]", `Asks every replica in the settings file, directly and at once, what it says
of itself: its role (a replica that lost its state is a "learner (rebuilding)"
until it has rebuilt), epoch, chosen and applied slot, and whom it believes
master; and lists the replicas that did not answer. It needs no master, so it
shows a cell without quorum as it is. Exits 0 when a replica serves as master,
1 otherwise. Slots and what a rebuilding replica lost are shown to the cell
administrator only (the settings file's administrator certificate is used when
it has one and no token was given).`)
	asJSON := fs.Bool("json", false, "print every replica's answer as JSON")
	if code, stop := e.parse(fs, args, 0, 0); stop {
		return code
	}
	f, err := client.ReadConfigFile(e.config)
	if err != nil {
		return e.fail("status", err)
	}
	admin := f.Admin.Cert != "" && e.token == ""
	cfg, err := f.Config(admin || e.admin)
	if err != nil {
		return e.fail("status", err)
	}
	if e.token != "" && !admin && !e.admin {
		cfg.Certificate, cfg.Token = nil, e.token
	}
	cfg.Logger = quietLogger()
	answers := askReplicas(e.ctx, cfg, min(e.timeout, statusAskTimeout))
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(answers)
	} else {
		printStatus(e, answers, admin || e.admin)
		if f.PublicKey != "" {
			fmt.Fprintf(e.stdout, "sequencer public key: %s\n", f.PublicKeyPath())
		}
	}
	answered := 0
	for _, a := range answers {
		if a.Status != nil {
			answered++
			if a.Status.Role == api.RoleMaster {
				return exitOK
			}
		}
	}
	if answered == 0 {
		fmt.Fprintf(e.stderr, "lockctl status: no replica answered (%s); is the cell running, and are these its addresses?\n", answers[0].Err)
	}
	return exitError
}

// askReplicas asks every address in cfg for its status, all at once, each
// within timeout, and returns the answers in cfg's order.
func askReplicas(ctx context.Context, cfg client.Config, timeout time.Duration) []replicaAnswer {
	out := make([]replicaAnswer, len(cfg.Addrs))
	var wg sync.WaitGroup
	for i, addr := range cfg.Addrs {
		out[i].Addr = addr
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			st, err := operator.StatusOfReplica(actx, cfg, addr)
			if err != nil {
				out[i].Err = statusError(err, actx)
				return
			}
			out[i].Status = st
		})
	}
	wg.Wait()
	return out
}

// statusError says in a few words why a replica did not answer.
func statusError(err error, ctx context.Context) string {
	if ctx.Err() != nil {
		return "no answer within the time allowed"
	}
	msg := err.Error()
	// The address is in the row already.
	if i := strings.Index(msg, ": "); i >= 0 && strings.HasPrefix(msg, "status of ") {
		msg = msg[i+2:]
	}
	return msg
}

// printStatus writes the table of answers and a headline saying whether
// the cell has a master.
func printStatus(e *env, answers []replicaAnswer, admin bool) {
	var cellName string
	var masters []string
	var top uint64
	believers := map[uint64][]string{}
	answered := 0
	for _, a := range answers {
		st := a.Status
		if st == nil {
			continue
		}
		answered++
		cellName = st.Cell
		top = max(top, st.Chosen)
		if st.Role == api.RoleMaster {
			masters = append(masters, fmt.Sprintf("master replica %d (%s), epoch %s", st.Replica, a.Addr, st.Epoch))
		}
		if st.Master != 0 {
			believers[st.Master] = append(believers[st.Master], fmt.Sprint(st.Replica))
		}
	}
	switch {
	case answered == 0:
		fmt.Fprintf(e.stdout, "no replica answered (%d asked)\n", len(answers))
	case len(masters) > 0:
		fmt.Fprintf(e.stdout, "cell %s: %s; %d of %d replicas answered\n", cellName, strings.Join(masters, "; "), answered, len(answers))
	default:
		var b []string
		for id, who := range believers {
			b = append(b, fmt.Sprintf("replica %s believes replica %d leads", strings.Join(who, ", "), id))
		}
		sort.Strings(b)
		why := "none knows of a master"
		if len(b) > 0 {
			why = strings.Join(b, ", ") + ", but it does not serve"
		}
		fmt.Fprintf(e.stdout, "cell %s: NO MASTER: %d of %d replicas answered and none is master (%s); a majority must run and reach each other\n", cellName, answered, len(answers), why)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tADDRESS\tROLE\tEPOCH\tMASTER\tCHOSEN\tAPPLIED\tLAG")
	var rebuilds, silent []string
	for _, a := range answers {
		st := a.Status
		if st == nil {
			fmt.Fprintf(tw, "-\t%s\tno answer\t-\t-\t-\t-\t-\n", a.Addr)
			silent = append(silent, fmt.Sprintf("  %s: %s", a.Addr, a.Err))
			continue
		}
		master := "none known"
		if st.Master != 0 {
			master = fmt.Sprint(st.Master)
		}
		if st.Rebuild != "" {
			rebuilds = append(rebuilds, fmt.Sprintf("replica %d %s", st.Replica, st.Rebuild))
		}
		if !admin {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t-\t-\t-\n", st.Replica, a.Addr, st.Role, st.Epoch, master)
			continue
		}
		lag := uint64(0)
		if top > st.Applied {
			lag = top - st.Applied
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", st.Replica, a.Addr, st.Role, st.Epoch, master, st.Chosen, st.Applied, lag)
	}
	_ = tw.Flush()
	if len(silent) > 0 {
		fmt.Fprintln(e.stdout, "did not answer:")
		for _, s := range silent {
			fmt.Fprintln(e.stdout, s)
		}
	}
	for _, r := range rebuilds {
		fmt.Fprintln(e.stdout, r)
	}
	if !admin {
		fmt.Fprintln(e.stdout, "(slots, lag and what a rebuilding replica lost are shown to the cell administrator only)")
	}
}
