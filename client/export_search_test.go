package client

import "context"

// SetLastNamer makes addr the replica the client's next search for the
// master asks first (as if its answer had named the master last).
func SetLastNamer(c *Client, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.lastNamer = addr
}

// FindMaster runs one search for the master that excludes replica except
// (at address skip) and returns the address it found.
func FindMaster(ctx context.Context, c *Client, except uint64, skip string) (string, error) {
	addr, cc, err := c.findServingMaster(ctx, except, skip)
	if cc != nil {
		_ = cc.Close()
	}
	return addr, err
}
