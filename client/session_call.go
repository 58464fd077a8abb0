package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/lockcell/lockcell/api"
)

// ready waits until the session is safe and returns the header to send
// and the channel that closes on the next state or epoch change.
func (s *Session) ready(ctx context.Context) (api.Header, <-chan struct{}, error) {
	for {
		s.mu.Lock()
		lapsed := s.lapseIfDueLocked()
		st, err, ch := s.mu.state, s.mu.err, s.mu.changed
		h := api.Header{Session: s.id, Epoch: s.mu.epoch, Token: s.cfg.Token}
		s.mu.Unlock()
		s.afterLapse(lapsed)
		switch st {
		case StateSafe:
			return h, ch, nil
		case StateExpired, StateClosed:
			return h, nil, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return h, nil, fmt.Errorf("client: waiting out jeopardy: %w", ctx.Err())
		}
	}
}

// call makes a call within the session: it waits out jeopardy, carries the
// session's epoch, re-establishes after a fail-over and retries any call
// refused before it took effect, and any call that lost its reply if the
// api method table says a repeat is harmless (api.MethodInfo.Retryable);
// otherwise such a call fails with ErrOutcomeUnknown. build makes the
// request for a header.
func (s *Session) call(ctx context.Context, m api.Method, build func(api.Header) any, resp any) error {
	return s.callWith(ctx, m, build, resp, nil)
}

// callWith is call with a hook run before every retry: if it reports done,
// callWith returns its error (nil for success) without another attempt.
func (s *Session) callWith(ctx context.Context, m api.Method, build func(api.Header) any, resp any,
	beforeRetry func(ctx context.Context, last error) (done bool, err error)) error {
	info, _ := m.Info() // an unknown method's zero entry is not idempotent
	var last error
	redirected := false
	for attempt := 0; ; attempt++ {
		if attempt > 0 && beforeRetry != nil {
			if done, err := beforeRetry(ctx, last); done {
				return err
			}
		}
		h, changed, err := s.ready(ctx)
		if err != nil {
			return err
		}
		before := s.c.redirectCount()
		req := build(h)
		sent, err := s.c.rpcOnce(ctx, m, req, resp)
		if err == nil {
			return nil
		}
		last = err
		if ctx.Err() != nil {
			return fmt.Errorf("client: %s: %w", m, ctx.Err())
		}
		if errors.Is(err, ErrClosed) {
			return err
		}
		if errors.Is(err, api.ErrSessionExpired) {
			s.finish(StateExpired, fmt.Errorf("%w: %w", ErrSessionExpired, err))
			return s.Err()
		}
		if errors.Is(err, api.ErrFailover) {
			// The master changed: the KeepAlive loop learns the new epoch
			// (and acknowledges the fail-over event); then retry.
			s.nudge()
			select {
			case <-changed:
			case <-ctx.Done():
				return fmt.Errorf("client: %s: %w (after %w)", m, ctx.Err(), err)
			}
			continue
		}
		retry, noEffect := classify(err)
		if !retry {
			return err
		}
		if sent && !noEffect && !info.Retryable(req) {
			return outcomeUnknown(m, err)
		}
		if s.c.redirectedSince(before, err) && !redirected {
			// Redirected to a named master (a hand-over's successor), by
			// this call's reply or another's: go there at once, but only
			// once in a row (two replicas may name each other).
			redirected = true
			continue
		}
		redirected = false
		if perr := s.c.pause(ctx); perr != nil {
			return fmt.Errorf("client: %s: %w (last error: %v)", m, perr, err)
		}
	}
}

// nudge asks the loop for a KeepAlive now.
func (s *Session) nudge() { s.c.ka.kick(s.ka) }
