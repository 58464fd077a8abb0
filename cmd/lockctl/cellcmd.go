package main

import (
	"fmt"
	"github.com/lockcell/lockcell/client/operator"
)

// cmdCell runs the cell operations: stepdown.
func cmdCell(e *env, args []string) int {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		out, code := e.stdout, exitOK
		if len(args) == 0 {
			out, code = e.stderr, exitUsage
		}
		fmt.Fprint(out, `usage: lockctl cell stepdown [--to N]

Operates the cell with the administrator's certificate from the config file.
'stepdown' asks the master to hand mastership over now (to replica N if
possible; by default to the most caught-up other replica that answers),
without waiting out its lease: a planned fail-over, for example before
maintenance on the master's host, or to watch one happen. The master
finishes the commands in flight, waits until the successor has caught
up, stops serving and tells the successor to take over at once; clients
are redirected to it, and their sessions, locks and handles survive.
'lockctl status' shows the new master.
`)
		return code
	}
	switch args[0] {
	case "stepdown":
		return cmdCellStepDown(e, args[1:])
	}
	fmt.Fprintf(e.stderr, "lockctl cell: unknown subcommand %q (stepdown)\n", args[0])
	return exitUsage
}

func cmdCellStepDown(e *env, args []string) int {
	fs := e.flags("cell stepdown", "[--to N]", "Asks the master to hand mastership over now (administrator).")
	to := fs.Uint64("to", 0, "the replica to hand over to, if it can (0: any)")
	if code, stop := e.parse(fs, args, 0, 0); stop {
		return code
	}
	ctx, cancel := e.bounded()
	defer cancel()
	c, _, err := e.dial(ctx, true)
	if err != nil {
		return e.fail("cell stepdown", err)
	}
	defer c.Close()
	st, err := operator.New(c).Status(ctx)
	if err != nil {
		return e.fail("cell stepdown", err)
	}
	// The master picks the successor itself unless told: it knows which
	// replica has caught up (the status only says who applied the most).
	got, err := operator.New(c).HandOver(ctx, *to)
	if err != nil {
		return e.fail("cell stepdown", err)
	}
	if got == 0 {
		fmt.Fprintf(e.stdout, "replica %d stepped down (epoch %s); 'lockctl status' shows the new master\n", st.Master, st.Epoch)
		return exitOK
	}
	fmt.Fprintf(e.stdout, "replica %d stepped down (epoch %s), handing over to replica %d; 'lockctl status' shows the new master\n", st.Master, st.Epoch, got)
	return exitOK
}
