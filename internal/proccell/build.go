package proccell

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
)

// LockcelldPackage is the import path of the replica binary.
const LockcelldPackage = "github.com/lockcell/lockcell/cmd/lockcelld"

// Build runs `go build -tags tags` of pkg (in the module that holds the
// current directory) into dir/name and returns the binary's path.
func Build(ctx context.Context, dir, name, tags, pkg string) (string, error) {
	out := filepath.Join(dir, name)
	args := []string{"build", "-o", out}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("proccell: go build -tags %q %s: %w: %s", tags, pkg, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// BuildLockcelld builds cmd/lockcelld into dir with the given build tags
// ("invariants" turns its invariant checks on) and returns its path.
func BuildLockcelld(ctx context.Context, dir, tags string) (string, error) {
	return Build(ctx, dir, "lockcelld", tags, LockcelldPackage)
}
