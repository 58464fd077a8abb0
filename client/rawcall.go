package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/transport"
)

// The calls in this file are the client's connection as a building block:
// sessionless calls with the client's fail-over, redirect and retry rules,
// for packages that add calls of their own on top of a Client (the
// operator package's administration calls). Applications use Session.

// Header returns the header of a sessionless call: it carries the client's
// tenant token (Config.Token), if any, and no session.
func (c *Client) Header() api.Header { return api.Header{Token: c.cfg.Token} }

// Call makes a sessionless call of method m with request req, decoding the
// reply into resp. It retries across fail-overs and redirects until ctx
// ends: any call refused before it took effect and, if the api method table
// says a repeat is harmless (api.MethodInfo.Retryable), a call whose reply
// was lost. A call that may have taken effect without its reply arriving
// returns an error wrapping ErrOutcomeUnknown. Error replies are *api.Error
// values; after Close it returns ErrClosed.
func (c *Client) Call(ctx context.Context, m api.Method, req, resp any) error {
	return c.call(ctx, m, req, resp)
}

// CallStream makes a sessionless call of method m whose reply is a stream:
// a head, decoded into head, then frames that read takes one at a time with
// next. read reports whether it consumed anything (started); an attempt
// that fails before then — no master, a fail-over, a connection lost
// before the head or the first frame — is retried like an idempotent Call
// until ctx ends. A failure after read started is returned as read returned
// it. An error reply is a *api.Error; after Close it returns ErrClosed.
func (c *Client) CallStream(ctx context.Context, m api.Method, req, head any,
	read func(next func() (transport.Frame, error)) (started bool, err error)) error {
	for {
		started, err := c.streamOnce(ctx, m, req, head, read)
		if err == nil {
			return nil
		}
		if started || ctx.Err() != nil || errors.Is(err, ErrClosed) {
			return err
		}
		if retry, _ := classify(err); !retry {
			return err
		}
		if perr := c.pause(ctx); perr != nil {
			return fmt.Errorf("client: %s: %w (last error: %v)", m, perr, err)
		}
	}
}

// streamOnce makes one attempt of CallStream.
func (c *Client) streamOnce(ctx context.Context, m api.Method, req, head any,
	read func(next func() (transport.Frame, error)) (bool, error)) (started bool, err error) {
	cc, err := c.use(ctx)
	if err != nil {
		return false, err
	}
	defer c.release(cc)
	s, _, err := c.exchange(ctx, cc, m, req, head)
	if s != nil {
		defer s.Close()
	}
	if err != nil {
		return false, err
	}
	started, err = read(func() (transport.Frame, error) { return s.ReadFrame(ctx) })
	if err == nil {
		c.succeeded()
	}
	return started, err
}

// AskReplica makes one call of method m to the replica at addr alone,
// over a connection of its own that it closes afterwards, with cfg's CA,
// credentials, timeouts and socket (cfg.Addrs is not used). Any replica
// answers the calls a follower serves (CellStatus), so this works when the
// cell has no master. It does not retry. The error names addr: a *api.Error
// for a refusal, a transport error if the replica cannot be reached before
// ctx ends, ErrInvalidConfig for a bad cfg.
func AskReplica(ctx context.Context, cfg Config, addr string, m api.Method, req, resp any) error {
	if len(cfg.Addrs) == 0 {
		cfg.Addrs = []string{addr}
	}
	cfg, err := cfg.populate()
	if err != nil {
		return err
	}
	cc, err := dialReplica(ctx, cfg, addr)
	if err != nil {
		return fmt.Errorf("%s of %s: %w", m, addr, err)
	}
	defer cc.Close()
	if err := callOn(ctx, cc, m, req, resp); err != nil {
		return fmt.Errorf("%s of %s: %w", m, addr, err)
	}
	return nil
}
