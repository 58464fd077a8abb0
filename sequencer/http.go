package sequencer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// DefaultHeader is the HTTP request header that carries a sequencer in its
// text form (String).
const DefaultHeader = "Lockcell-Sequencer"

// RejectHeader is the response header naming why a sequencer was rejected:
// "missing", "malformed", "forged", "stale", "conflict" or "unconfirmed".
const RejectHeader = "Lockcell-Sequencer-Error"

// ErrMissing: the request carries no sequencer.
var ErrMissing = errors.New("sequencer: missing")

// HTTPOptions configures Middleware. The zero value requires a sequencer in
// DefaultHeader on every request.
type HTTPOptions struct {
	// Header is the request header to read. If empty, DefaultHeader.
	Header string
	// Exempt, if set, selects requests that need no sequencer (for example
	// reads); they reach the handler unvalidated unless they carry one.
	Exempt func(*http.Request) bool
	// OnReject, if set, is called for every rejected request (for logs and
	// audit trails) before the error response is written.
	OnReject func(r *http.Request, err error)
}

type ctxKey struct{}

// FromContext returns the validated sequencer of the request whose context
// this is (inside a handler behind Middleware).
func FromContext(ctx context.Context) (Sequencer, bool) {
	s, ok := ctx.Value(ctxKey{}).(Sequencer)
	return s, ok
}

// SetHeader puts s in h under DefaultHeader (for clients of protected
// servers).
func SetHeader(h http.Header, s Sequencer) { h.Set(DefaultHeader, s.String()) }

// HTTPStatus maps a rejection to its HTTP status: 428 missing, 400
// malformed, 403 forged, 409 stale or conflicting, 503 unconfirmed, 500
// otherwise.
func HTTPStatus(err error) (status int, reason string) {
	switch {
	case errors.Is(err, ErrMissing):
		return http.StatusPreconditionRequired, "missing"
	case errors.Is(err, ErrMalformed), errors.Is(err, ErrVersion):
		return http.StatusBadRequest, "malformed"
	case errors.Is(err, ErrForged):
		return http.StatusForbidden, "forged"
	case errors.Is(err, ErrStale):
		return http.StatusConflict, "stale"
	case errors.Is(err, ErrConflict):
		return http.StatusConflict, "conflict"
	case errors.Is(err, ErrUnconfirmed):
		return http.StatusServiceUnavailable, "unconfirmed"
	}
	return http.StatusInternalServerError, "error"
}

// Middleware protects next: each request must carry a sequencer that v
// accepts, and next runs inside v.Do, so no request with a newer grant of
// the same lock is validated until next returns. The sequencer is in the
// request's context (FromContext). A rejected request gets the status of
// HTTPStatus, the reason in RejectHeader, and a plain-text explanation;
// next does not run.
func Middleware(v *Validator, next http.Handler, opts HTTPOptions) http.Handler {
	header := opts.Header
	if header == "" {
		header = DefaultHeader
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		text := r.Header.Get(header)
		if text == "" && opts.Exempt != nil && opts.Exempt(r) {
			next.ServeHTTP(w, r)
			return
		}
		reject := func(err error) {
			if opts.OnReject != nil {
				opts.OnReject(r, err)
			}
			status, reason := HTTPStatus(err)
			w.Header().Set(RejectHeader, reason)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(status)
			fmt.Fprintf(w, "lockcell sequencer rejected (%s): %v\n", reason, err)
		}
		if text == "" {
			reject(fmt.Errorf("%w: the request has no %s header", ErrMissing, header))
			return
		}
		s, err := ParseString(text)
		if err != nil {
			reject(err)
			return
		}
		err = v.Do(r.Context(), s, func() error {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, s)))
			return nil
		})
		if err != nil {
			reject(err)
		}
	})
}
