package client

import (
	"context"
	"fmt"

	"github.com/lockcell/lockcell/api"
)

// StepDown asks the master to hand mastership over now, without waiting
// out its master lease (cell administrator only): a planned fail-over, as
// before maintenance on the master's host, or to watch one. next names the
// preferred successor (0: the master picks the most caught-up replica that
// answers); it is a preference, not a promise. Sessions survive the
// hand-over; their holders see a fail-over event. It returns an error
// wrapping api.ErrPermissionDenied for a caller that is not the
// administrator. HandOver is StepDown that also reports the successor.
func (c *Client) StepDown(ctx context.Context, next uint64) error {
	_, err := c.HandOver(ctx, next)
	return err
}

// HandOver is StepDown, returning the replica the master handed
// mastership to (0 if it stepped down without naming one, or the cell
// does not say).
func (c *Client) HandOver(ctx context.Context, next uint64) (uint64, error) {
	var resp api.StepDownResponse
	if err := c.call(ctx, api.MethodStepDown, &api.StepDownRequest{Header: c.hdr(), Next: next}, &resp); err != nil {
		return 0, fmt.Errorf("step down: %w", err)
	}
	return resp.Successor, nil
}
