package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
	"github.com/lockcell/lockcell/internal/certs"
)

func cmdSessions(e *env, args []string) int {
	return tenantListing(e, args, "sessions", "Lists the open sessions of your tenant (administrators: of --tenant).",
		"SESSION\tTENANT\tPRINCIPAL\tCREATED",
		func(ctx context.Context, c *client.Client, tenant string) ([]string, error) {
			ss, err := operator.New(c).ListSessions(ctx, tenant)
			rows := make([]string, len(ss))
			for i, s := range ss {
				rows[i] = fmt.Sprintf("%d\t%s\t%s\t%s", s.ID, s.Tenant, s.Principal, time.Unix(0, s.Created).UTC().Format(time.RFC3339))
			}
			return rows, err
		})
}

func cmdLocks(e *env, args []string) int {
	return tenantListing(e, args, "locks", "Lists the held locks of your tenant (administrators: of --tenant).",
		"PATH\tMODE\tGENERATION\tHOLDERS",
		func(ctx context.Context, c *client.Client, tenant string) ([]string, error) {
			ls, err := operator.New(c).ListLocks(ctx, tenant)
			rows := make([]string, len(ls))
			for i, l := range ls {
				rows[i] = fmt.Sprintf("%s\t%s\t%d\t%v", l.Path, l.Mode, l.Generation, l.Holders)
			}
			return rows, err
		})
}

// tenantListing runs a listing command with a --tenant flag: it dials,
// lists, and prints a table with header and one tab-separated row per item.
func tenantListing(e *env, args []string, name, summary, header string, list func(context.Context, *client.Client, string) ([]string, error)) int {
	fs := e.flags(name, "[--tenant T]", summary)
	tenant := fs.String("tenant", "", "tenant to list (default: the certificate's own)")
	if code, stop := e.parse(fs, args, 0, 0); stop {
		return code
	}
	ctx, cancel := e.bounded()
	defer cancel()
	c, _, err := e.dial(ctx, false)
	if err != nil {
		return e.fail(name, err)
	}
	defer c.Close()
	rows, err := list(ctx, c, *tenant)
	if err != nil {
		return e.fail(name, err)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	_ = tw.Flush()
	return exitOK
}

func quotaFlags(fs *flag.FlagSet) *api.TenantQuota {
	q := &api.TenantQuota{}
	bindQuota(fs, q)
	return q
}

// mergeQuota returns cur with the quota flags set on fs applied.
func mergeQuota(fs *flag.FlagSet, cur api.TenantQuota) api.TenantQuota {
	into := flag.NewFlagSet("", flag.ContinueOnError)
	bindQuota(into, &cur)
	fs.Visit(func(f *flag.Flag) {
		if into.Lookup(f.Name) != nil {
			_ = into.Set(f.Name, f.Value.String())
		}
	})
	return cur
}

// bindQuota defines the quota flags on fs, bound to q's fields and with
// their present values as defaults.
func bindQuota(fs *flag.FlagSet, q *api.TenantQuota) {
	fs.Uint64Var(&q.MaxNodes, "max-nodes", q.MaxNodes, "most nodes below the tenant root (0: unlimited)")
	fs.Uint64Var(&q.MaxBytes, "max-bytes", q.MaxBytes, "most contents bytes (0: unlimited)")
	fs.Uint64Var(&q.MaxSessions, "max-sessions", q.MaxSessions, "most open sessions (0: unlimited)")
	fs.Uint64Var(&q.MaxLocks, "max-locks", q.MaxLocks, "most lock grants held (0: unlimited)")
	fs.Uint64Var(&q.MaxWaiters, "max-waiters", q.MaxWaiters, "most blocked Acquire calls at the master (0: unlimited)")
	fs.Uint64Var(&q.MaxContents, "max-contents", q.MaxContents, "largest file contents in bytes (0: the cell's limit)")
	fs.Uint64Var(&q.OpsPerSecond, "ops-per-second", q.OpsPerSecond, "rate limit of calls at the master (0: unlimited)")
	fs.Uint64Var(&q.KeepAlivesPerSecond, "keepalives-per-second", q.KeepAlivesPerSecond, "KeepAlive budget at the master (0: unlimited)")
	fs.Uint64Var(&q.Weight, "weight", q.Weight, "fair-share weight under overload (0: 1)")
}

func cmdTenant(e *env, args []string) int {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		out := e.stdout
		code := exitOK
		if len(args) == 0 {
			out, code = e.stderr, exitUsage
		}
		fmt.Fprint(out, `usage: lockctl tenant create NAME [quota flags]
       lockctl tenant update NAME [quota flags]
       lockctl tenant list
       lockctl tenant token TENANT PRINCIPAL [--out FILE]
       lockctl tenant tokens TENANT
       lockctl tenant revoke TENANT TOKEN-ID

Manages tenants and their tokens with the administrator's certificate from
the config file. update changes only the quotas given; the others keep
their values.
Quota flags (0: unlimited): --max-nodes, --max-bytes, --max-sessions,
--max-locks, --max-waiters, --max-contents, --ops-per-second,
--keepalives-per-second, --weight (fair share; 0 means 1).
'token' issues a tenant token for PRINCIPAL: it is printed once (or written
to --out, mode 0600) and the cell keeps only its hash. 'revoke' revokes it:
every call with it fails from then on and its sessions are expired.
`)
		return code
	}
	sub, rest := args[0], args[1:]
	var fs *flag.FlagSet
	var q *api.TenantQuota
	switch sub {
	case "create", "update":
		fs = e.flags("tenant "+sub, "NAME [flags]", sub+"s a tenant and its quota (administrator).")
		q = quotaFlags(fs)
		if code, stop := e.parse(fs, rest, 1, 1); stop {
			return code
		}
	case "list":
		fs = e.flags("tenant list", "", "Lists the tenants with their quotas and usage (administrator; a tenant principal sees its own).")
		if code, stop := e.parse(fs, rest, 0, 0); stop {
			return code
		}
	case "token", "tokens", "revoke":
		return cmdTenantToken(e, sub, rest)
	default:
		fmt.Fprintf(e.stderr, "lockctl tenant: unknown subcommand %q (create, update, list, token, tokens, revoke)\n", sub)
		return exitUsage
	}
	ctx, cancel := e.bounded()
	defer cancel()
	c, _, err := e.dial(ctx, sub != "list" || e.token == "")
	if err != nil {
		return e.fail("tenant", err)
	}
	defer c.Close()
	var ts []api.TenantInfo
	switch sub {
	case "create":
		var t api.TenantInfo
		t, err = operator.New(c).CreateTenant(ctx, fs.Arg(0), *q, api.ACLNames{})
		ts = []api.TenantInfo{t}
	case "update":
		// Quotas not given keep their values.
		var all []api.TenantInfo
		if all, err = operator.New(c).ListTenants(ctx); err != nil {
			break
		}
		i := slices.IndexFunc(all, func(t api.TenantInfo) bool { return t.Name == fs.Arg(0) })
		if i < 0 {
			err = fmt.Errorf("tenant %q: %w", fs.Arg(0), api.ErrNotFound)
			break
		}
		var t api.TenantInfo
		t, err = operator.New(c).UpdateTenant(ctx, fs.Arg(0), mergeQuota(fs, all[i].Quota))
		ts = []api.TenantInfo{t}
	case "list":
		ts, err = operator.New(c).ListTenants(ctx)
	}
	if err != nil {
		return e.fail("tenant", err)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tNODES\tBYTES\tSESSIONS\tLOCKS\tWAITERS\tMAX-CONTENTS\tOPS/S\tKEEPALIVES/S\tWEIGHT")
	lim := func(used, max uint64) string {
		if max == 0 {
			return fmt.Sprintf("%d", used)
		}
		return fmt.Sprintf("%d/%d", used, max)
	}
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, lim(t.Usage.Nodes, t.Quota.MaxNodes), lim(t.Usage.Bytes, t.Quota.MaxBytes),
			lim(t.Usage.Sessions, t.Quota.MaxSessions), lim(t.Usage.Locks, t.Quota.MaxLocks), lim(t.Usage.Waiters, t.Quota.MaxWaiters),
			unlimited(t.Quota.MaxContents), unlimited(t.Quota.OpsPerSecond), unlimited(t.Quota.KeepAlivesPerSecond), unlimited(max(t.Quota.Weight, 1)))
	}
	_ = tw.Flush()
	return exitOK
}

// unlimited formats a limit, "-" for none.
func unlimited(v uint64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%d", v)
}

// cmdTenantToken runs tenant token, tokens and revoke.
func cmdTenantToken(e *env, sub string, args []string) int {
	var fs *flag.FlagSet
	var out *string
	switch sub {
	case "token":
		fs = e.flags("tenant token", "TENANT PRINCIPAL [--out FILE]", "Issues a tenant token for PRINCIPAL of TENANT (administrator).")
		out = fs.String("out", "", "write the token to FILE (mode 0600) instead of printing it")
		if code, stop := e.parse(fs, args, 2, 2); stop {
			return code
		}
	case "tokens":
		fs = e.flags("tenant tokens", "TENANT", "Lists TENANT's tokens, without secrets (administrator).")
		if code, stop := e.parse(fs, args, 1, 1); stop {
			return code
		}
	case "revoke":
		fs = e.flags("tenant revoke", "TENANT TOKEN-ID", "Revokes a token: every call with it fails and its sessions are expired (administrator).")
		if code, stop := e.parse(fs, args, 2, 2); stop {
			return code
		}
	}
	ctx, cancel := e.bounded()
	defer cancel()
	c, _, err := e.dial(ctx, true)
	if err != nil {
		return e.fail("tenant "+sub, err)
	}
	defer c.Close()
	switch sub {
	case "token":
		tok, info, err := operator.New(c).IssueToken(ctx, fs.Arg(0), fs.Arg(1))
		if err != nil {
			return e.fail("tenant token", err)
		}
		if *out != "" {
			if err := os.WriteFile(*out, []byte(tok+"\n"), 0o600); err != nil {
				return e.fail("tenant token", fmt.Errorf("token %s issued but not written (revoke it): %w", info.ID, err))
			}
			fmt.Fprintf(e.stdout, "token %s for %s/%s written to %s\n", info.ID, info.Tenant, info.Principal, *out)
			return exitOK
		}
		fmt.Fprintf(e.stdout, "token %s for %s/%s (shown once; the cell keeps only its hash):\n%s\n", info.ID, info.Tenant, info.Principal, tok)
	case "tokens":
		ts, err := operator.New(c).ListTokens(ctx, fs.Arg(0))
		if err != nil {
			return e.fail("tenant tokens", err)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOKEN-ID\tTENANT\tPRINCIPAL\tCREATED")
		for _, t := range ts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.ID, t.Tenant, t.Principal, time.Unix(0, t.Created).UTC().Format(time.RFC3339))
		}
		_ = tw.Flush()
	case "revoke":
		info, err := operator.New(c).RevokeToken(ctx, fs.Arg(0), fs.Arg(1))
		if err != nil {
			return e.fail("tenant revoke", err)
		}
		fmt.Fprintf(e.stdout, "revoked token %s of %s/%s\n", info.ID, info.Tenant, info.Principal)
	}
	return exitOK
}

func cmdCerts(e *env, args []string) int {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		out := e.stdout
		code := exitOK
		if len(args) == 0 {
			out, code = e.stderr, exitUsage
		}
		fmt.Fprint(out, `usage: lockctl certs ca --dir DIR --cell NAME
       lockctl certs client --dir DIR --tenant T --principal P

'ca' creates a cell CA (DIR/ca.pem, DIR/ca-key.pem). 'client' issues a
client certificate from the CA in DIR for tenant T's principal P
(DIR/T-P.pem, DIR/T-P-key.pem); the cell administrator is tenant _cell,
principal admin.
`)
		return code
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "ca":
		fs := e.flags("certs ca", "--dir DIR --cell NAME", "Creates a cell CA in DIR.")
		dir := fs.String("dir", "", "output directory (required)")
		cellName := fs.String("cell", "", "cell name (required)")
		if code, stop := e.parse(fs, rest, 0, 0); stop {
			return code
		}
		if *dir == "" || *cellName == "" {
			fmt.Fprintln(e.stderr, "lockctl certs ca: --dir and --cell are required")
			return exitUsage
		}
		if _, err := os.Stat(filepath.Join(*dir, "ca-key.pem")); err == nil {
			fmt.Fprintf(e.stderr, "lockctl certs ca: %s already holds a CA; refusing to overwrite it\n", *dir)
			return exitError
		}
		ca, err := certs.NewCA(*cellName, certs.Options{})
		if err != nil {
			return e.fail("certs ca", err)
		}
		key, err := ca.KeyPEM()
		if err != nil {
			return e.fail("certs ca", err)
		}
		if err := writeFiles(*dir, map[string][]byte{"ca.pem": ca.CertPEM(), "ca-key.pem": key}); err != nil {
			return e.fail("certs ca", err)
		}
		fmt.Fprintf(e.stdout, "wrote %s and %s\n", filepath.Join(*dir, "ca.pem"), filepath.Join(*dir, "ca-key.pem"))
		return exitOK
	case "client":
		fs := e.flags("certs client", "--dir DIR --tenant T --principal P", "Issues a client certificate from the CA in DIR.")
		dir := fs.String("dir", "", "directory holding ca.pem and ca-key.pem; output goes there too (required)")
		tenant := fs.String("tenant", "", "tenant (required; _cell for administrators)")
		principal := fs.String("principal", "", "principal (required)")
		if code, stop := e.parse(fs, rest, 0, 0); stop {
			return code
		}
		if *dir == "" || *tenant == "" || *principal == "" {
			fmt.Fprintln(e.stderr, "lockctl certs client: --dir, --tenant and --principal are required")
			return exitUsage
		}
		certPEM, err := os.ReadFile(filepath.Join(*dir, "ca.pem"))
		if err != nil {
			return e.fail("certs client", err)
		}
		keyPEM, err := os.ReadFile(filepath.Join(*dir, "ca-key.pem"))
		if err != nil {
			return e.fail("certs client", err)
		}
		ca, err := certs.LoadCA(certPEM, keyPEM)
		if err != nil {
			return e.fail("certs client", err)
		}
		c, err := ca.IssueClient(certs.ClientID{Tenant: *tenant, Principal: *principal}, certs.Options{})
		if err != nil {
			return e.fail("certs client", err)
		}
		cp, kp, err := certs.EncodeKeyPair(c)
		if err != nil {
			return e.fail("certs client", err)
		}
		base := *tenant + "-" + *principal
		if err := writeFiles(*dir, map[string][]byte{base + ".pem": cp, base + "-key.pem": kp}); err != nil {
			return e.fail("certs client", err)
		}
		fmt.Fprintf(e.stdout, "wrote %s and %s\n", filepath.Join(*dir, base+".pem"), filepath.Join(*dir, base+"-key.pem"))
		return exitOK
	}
	fmt.Fprintf(e.stderr, "lockctl certs: unknown subcommand %q (ca, client)\n", sub)
	return exitUsage
}

func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, name := range sortedKeys(files) {
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o600); err != nil {
			return err
		}
	}
	return nil
}
