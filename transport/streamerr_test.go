package transport

import (
	"errors"
	"strings"
	"testing"

	"github.com/quic-go/quic-go"
)

// TestStreamErrOnce checks that classifying an error twice does not repeat
// its prefix ("transport: connection closed: transport: connection closed").
func TestStreamErrOnce(t *testing.T) {
	for _, raw := range []error{
		&quic.ApplicationError{ErrorCode: 1, ErrorMessage: "bye"},
		&quic.StreamError{StreamID: 4, ErrorCode: StreamCodeCanceled},
		&quic.StreamError{StreamID: 4, ErrorCode: StreamCodeBadFrame, Remote: true},
	} {
		once := streamErr(raw)
		twice := streamErr(once)
		if twice.Error() != once.Error() {
			t.Errorf("streamErr twice: %q, once: %q", twice, once)
		}
		for _, s := range []error{ErrConnClosed, ErrStreamCanceled, ErrFrameRejected} {
			if n := strings.Count(twice.Error(), s.Error()); n > 1 {
				t.Errorf("%q repeats %q", twice, s)
			}
		}
		if !errors.Is(twice, raw) {
			t.Errorf("%v lost its cause %v", twice, raw)
		}
	}
}
