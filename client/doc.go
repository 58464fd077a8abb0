// Package client is the Go library users import to talk to a lockcell
// cell: sessions with Chubby's jeopardy and grace period, handles and
// locks with fencing sequencers, and the Mutex and Election recipes.
//
// # Life cycle
//
// Dial returns a *Client connected to the master (it follows NotMaster
// redirects and reconnects with backoff). Client.NewSession creates a
// session and starts its KeepAlive loop; Session.Open opens nodes;
// Handle.Acquire takes locks. Close the Session (which releases its locks
// at once) and then the Client.
//
//	c, err := client.Dial(ctx, cfg)
//	s, err := c.NewSession(ctx)
//	l, err := client.NewMutex(s, "/tenant/job").Lock(ctx)
//	// work under l.Context(); pass l.Sequencer() to protected servers
//	err = l.Release(ctx)
//
// # Sessions, jeopardy and grace
//
// The KeepAlive loop keeps a local lease that ends no later than the
// master's (see Session). When it runs out the session is in jeopardy:
// each held Lock's context is cancelled, the cache is emptied, and calls
// wait until the session is safe again (or their context ends) while the
// loop looks for a master for Config.GracePeriod (45 s by default). The
// session then reports safe, or expired; expiry is final (Session.Done,
// Session.Err, Session.Ctx). Session.Events and Config.OnEvent deliver
// jeopardy, safe, expired, fail-over and node events.
//
// # Fail-over
//
// A master answers every KeepAlive on a known cadence (a twelfth of the
// session lease by default: 1 s of 12 s), so a client always keeps most
// of its lease in hand (about 11 s of 12 s). A master that leaves a call
// unanswered for half the master lease (0.4 s of the cell's default
// 0.8 s), or its KeepAlives past the cadence and SilenceMargin, is
// suspected dead, deposed or cut off: the client then asks every replica
// at once who the master is, other than the suspect, and each replica
// answers the moment it knows (at the election), so the client moves to
// the new master within a round trip of its election; it does the same
// when a KeepAlive fails without naming the master. A fail-over that ends
// within the lease is invisible to lock holders: no jeopardy, lock
// contexts intact, one EventFailover.
//
// # Calls and retries
//
// Every call in a session carries the session's master epoch; a call
// refused because the master changed (Failover, NotMaster) is retried
// against the new master once the KeepAlive loop has re-established the
// session. Reads and other idempotent calls are also retried when their
// reply is lost; writes that are not safe to repeat return an error
// wrapping ErrOutcomeUnknown instead. Acquire and Release check the lock's
// state at the cell before repeating themselves.
//
// # Credentials and tenant limits
//
// A client proves its principal with a client certificate
// (Config.Certificate) or with a tenant token issued by the cell
// administrator (Config.Token; see operator.Operator.IssueToken), never
// both. A token is sent with every request; once it is revoked every call
// fails with api.ErrUnauthenticated and its sessions end (Session.Done).
// A call the master refuses for a tenant limit (operations per second, a
// full fair-share queue) fails with api.ErrResourceExhausted whose
// api.Error.RetryAfter says when to retry; the library returns it rather
// than retrying on its own, except for KeepAlives, which wait that long,
// and NewSession, which asks again after that pause (at most ShedRetries
// times): a shed CreateSession created nothing.
//
// # Cache
//
// Config.Cache (off by default) caches file contents for handles of files.
// The master registers the session as caching a node when it answers a
// read as Cacheable, and before any later write to the node completes it
// sends an invalidation event and waits for the session's acknowledgement
// (api.OpenRequest.Cache). The KeepAlive loop drops the entry and
// acknowledges at once; the whole cache is dropped on fail-over and
// overflow, and emptied and turned off in jeopardy. A read after one's own
// write sees it (the write drops the entry).
//
// # Operators
//
// The operators' and administrator's calls (cell status, tenants, tokens,
// lists of sessions and locks, hand-over, backups) live in package
// client/operator, which builds on a Client's connection through Call,
// CallStream and AskReplica.
//
// # Concurrency
//
// Client, Session, Handle, Lock, Mutex and Election are safe for concurrent
// use. A Client runs one KeepAlive loop for all its sessions (two
// goroutines, however many sessions it has); a Session has no goroutine of
// its own, except one that delivers its events while some are queued.
package client
