// Package tools pins the external programs graft's tests and local stack run
// as separate processes — the Temporal CLI (its dev server), versitygw (an
// S3 server), and the Temporal server with its SQL schema tool (the
// production-shape tier, cmd/internal/prodtier) — and builds each once, from the
// Go module proxy, into the repository's ignored .bin/ directory, keyed by
// version. A build is guarded by a file lock so parallel test binaries never
// build the same tool twice.
//
// Each tool is built by `go install module@version` in its own module
// context, never through graft's go.mod: the Temporal server's dependencies
// (its own go.temporal.io/api and grpc) need not agree with the SDK's.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Tool is a pinned external program.
type Tool struct {
	Name    string // binary name in .bin/
	Module  string // go install path
	Version string
	// Installs is the name go install gives the binary (the last element of
	// Module) when it differs from Name; the binary is renamed to Name.
	Installs string
	// ModulePath and Files: files of the tool's module (ModulePath at
	// Version, from the module cache), copied next to the binary by the
	// build, at their base names. Default none.
	ModulePath string
	Files      []string
}

// The pinned tools. Bumping a version builds a new binary next to the old one.
var (
	Temporal  = Tool{Name: "temporal", Module: "github.com/temporalio/cli/cmd/temporal", Version: "v1.5.1"}
	VersityGW = Tool{Name: "versitygw", Module: "github.com/versity/versitygw/cmd/versitygw", Version: "v1.8.0"}
	// TemporalServer is the server docker-compose.yml runs
	// (temporalio/auto-setup at the same version), and TemporalSQLTool its
	// schema tool, from the same module version.
	// The build keeps the server's docker/config_template.yaml, the
	// template the image renders its configuration from, next to it.
	TemporalServer = Tool{Name: "temporal-server", Module: "go.temporal.io/server/cmd/server", Version: "v1.29.1", Installs: "server",
		ModulePath: "go.temporal.io/server", Files: []string{"docker/config_template.yaml"}}
	TemporalSQLTool = Tool{Name: "temporal-sql-tool", Module: "go.temporal.io/server/cmd/tools/sql", Version: TemporalServer.Version, Installs: "sql"}
)

// Lanes lists every pinned tool, in two sequences of builds of about equal
// length that can run at once; the Temporal server and its schema tool share
// a lane because they share a module.
var Lanes = [][]Tool{{Temporal}, {VersityGW, TemporalServer, TemporalSQLTool}}

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

// File returns where the copy of t's module file name (one of Files) lives
// once built.
func (t Tool) File(name string) (string, error) {
	path, err := t.Path()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(path), filepath.Base(name)), nil
}

// ready reports whether t's binary and every one of its Files are in place.
func (t Tool) ready(path string) bool {
	if !isExecutable(path) {
		return false
	}
	for _, f := range t.Files {
		if _, err := os.Stat(filepath.Join(filepath.Dir(path), filepath.Base(f))); err != nil {
			return false
		}
	}
	return true
}

// Ensure returns the path of t's binary, building it first if it is missing.
// A cold build takes minutes on two cores (docs/benchmarks.md has the
// Temporal server's).
func (t Tool) Ensure(ctx context.Context) (string, error) {
	path, err := t.Path()
	if err != nil {
		return "", err
	}
	if t.ready(path) {
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
	if t.ready(path) { // another process built it while we waited
		return path, nil
	}
	// The files first: a binary in place means they are too.
	if err := t.copyFiles(ctx, dir); err != nil {
		return "", err
	}
	if isExecutable(path) {
		return path, nil
	}
	// No symbol table or DWARF: nothing debugs these binaries, and the linker
	// of a large one spends much of its time writing them.
	cmd := exec.CommandContext(ctx, "go", "install", "-ldflags=-s -w", t.Module+"@"+t.Version)
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build %s@%s: %w\n%s", t.Module, t.Version, err, out)
	}
	if t.Installs != "" && t.Installs != t.Name {
		if err := os.Rename(filepath.Join(dir, t.Installs), path); err != nil {
			return "", fmt.Errorf("build %s@%s: %w", t.Module, t.Version, err)
		}
	}
	if !isExecutable(path) {
		return "", fmt.Errorf("build %s@%s: no binary at %s", t.Module, t.Version, path)
	}
	return path, nil
}

// copyFiles copies t.Files from the module cache into dir.
func (t Tool) copyFiles(ctx context.Context, dir string) error {
	if len(t.Files) == 0 {
		return nil
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", t.ModulePath+"@"+t.Version)
	cmd.Dir = os.TempDir() // outside any module: the tool's own module context
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("build %s: download %s@%s: %w\n%s", t.Name, t.ModulePath, t.Version, err, out)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return fmt.Errorf("build %s: download %s@%s: no module directory in %q (%v)", t.Name, t.ModulePath, t.Version, out, err)
	}
	for _, f := range t.Files {
		b, err := os.ReadFile(filepath.Join(mod.Dir, filepath.FromSlash(f)))
		if err != nil {
			return fmt.Errorf("build %s: %w", t.Name, err)
		}
		dst := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(dst+".tmp", b, 0o644); err != nil {
			return fmt.Errorf("build %s: %w", t.Name, err)
		}
		if err := os.Rename(dst+".tmp", dst); err != nil {
			return fmt.Errorf("build %s: %w", t.Name, err)
		}
	}
	return nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
