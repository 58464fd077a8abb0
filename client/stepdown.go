package client

import (
	"context"
	"fmt"

	"github.com/lockcell/lockcell/api"
)

// StepDown asks the master to hand mastership over now, without waiting
// out its master lease (cell administrator only): a planned fail-over, as
// before maintenance on the master's host, or to watch one. next names the
// preferred successor (0 for any); it is a preference, not a promise.
// Sessions survive the hand-over; their holders see a fail-over event. It
// returns an error wrapping api.ErrPermissionDenied for a caller that is
// not the administrator.
func (c *Client) StepDown(ctx context.Context, next uint64) error {
	var resp api.Empty
	if err := c.call(ctx, api.MethodStepDown, &api.StepDownRequest{Header: c.hdr(), Next: next}, &resp, false); err != nil {
		return fmt.Errorf("step down: %w", err)
	}
	return nil
}
