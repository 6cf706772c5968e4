// Package tools pins the external programs graft's tests and local stack run
// as separate processes — the Temporal CLI (its dev server) and versitygw (an
// S3 server) — and builds each once, from the Go module proxy, into the
// repository's ignored .bin/ directory, keyed by version. A build is guarded
// by a file lock so parallel test binaries never build the same tool twice.
package tools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Tool is a pinned external program.
type Tool struct {
	Name    string // binary name
	Module  string // go install path
	Version string
}

// The pinned tools. Bumping a version builds a new binary next to the old one.
var (
	Temporal  = Tool{Name: "temporal", Module: "github.com/temporalio/cli/cmd/temporal", Version: "v1.5.1"}
	VersityGW = Tool{Name: "versitygw", Module: "github.com/versity/versitygw/cmd/versitygw", Version: "v1.8.0"}
)

// All lists every pinned tool.
var All = []Tool{VersityGW, Temporal}

// BinDir returns the directory tools are built into: $GRAFT_BIN_DIR, or
// .bin/ at the root of the module that contains the working directory.
func BinDir() (string, error) {
	if d := os.Getenv("GRAFT_BIN_DIR"); d != "" {
		return filepath.Abs(d)
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".bin"), nil
}

// ModuleRoot walks up from the working directory to the directory holding go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find module root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Path returns where t's binary lives once built.
func (t Tool) Path() (string, error) {
	bin, err := BinDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(bin, t.Name+"-"+t.Version, t.Name), nil
}

// Ensure returns the path of t's binary, building it first if it is missing.
// A cold build takes minutes (the Temporal CLI about eight on two cores).
func (t Tool) Ensure(ctx context.Context) (string, error) {
	path, err := t.Path()
	if err != nil {
		return "", err
	}
	if isExecutable(path) {
		return path, nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build %s: %w", t.Name, err)
	}
	lock, err := os.OpenFile(filepath.Join(filepath.Dir(dir), "."+t.Name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("build %s: lock: %w", t.Name, err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", fmt.Errorf("build %s: lock: %w", t.Name, err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	if isExecutable(path) { // another process built it while we waited
		return path, nil
	}
	cmd := exec.CommandContext(ctx, "go", "install", t.Module+"@"+t.Version)
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build %s@%s: %w\n%s", t.Module, t.Version, err, out)
	}
	if !isExecutable(path) {
		return "", fmt.Errorf("build %s@%s: no binary at %s", t.Module, t.Version, path)
	}
	return path, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
