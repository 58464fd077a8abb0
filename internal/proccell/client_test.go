package proccell

import (
	"context"

	"github.com/lockcell/lockcell/client"
)

// putFile creates path through a session of cfg.
func putFile(ctx context.Context, cfg client.Config, path string) error {
	cl, err := client.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer cl.Close()
	s, err := cl.NewSession(ctx)
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	_, err = s.Open(ctx, path, client.OpenOptions{Create: true})
	return err
}
