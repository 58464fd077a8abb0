package client

import (
	"context"
	"fmt"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/sequencer"
)

// CheckSequencer asks the cell whether seq is still current: its lock is
// held in its mode at its generation on the same node instance. It makes
// Session a sequencer.Checker for a sequencer.Validator.
func (s *Session) CheckSequencer(ctx context.Context, seq sequencer.Sequencer) (bool, string, error) {
	b, err := seq.Marshal()
	if err != nil {
		return false, "", err
	}
	var resp api.CheckSequencerResponse
	err = s.call(ctx, api.MethodCheckSequencer, func(h api.Header) any {
		return &api.CheckSequencerRequest{Header: h, Sequencer: b}
	}, &resp)
	if err != nil {
		return false, "", fmt.Errorf("check sequencer: %w", err)
	}
	return resp.Valid, resp.Reason, nil
}
