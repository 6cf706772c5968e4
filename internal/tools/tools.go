// Package tools pins the external programs graft's tests and local stack run as
// separate processes — the Temporal CLI (its dev server), versitygw and MinIO (S3
// servers), and the Temporal server with its SQL schema tool (the
// production-shape tier, cmd/internal/prodtier) — and builds each once, from the
// Go module proxy, into the repository's ignored .bin/ directory, keyed by
// version, under a file lock so that parallel test binaries never build the same
// tool twice.
//
// No tool is built through graft's go.mod: the Temporal server's dependencies (its
// own go.temporal.io/api and grpc) need not agree with the SDK's. Each is built by
// `go install module@version`, except the Temporal server and its schema tool, built
// in the Temporal CLI's module context: the CLI embeds the same server version, so
// after its build the server links in seconds instead of compiling for minutes.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Tool is a pinned external program.
type Tool struct {
	Name    string // binary name in .bin/; go install names it after Module's last element
	Module  string // go install path
	Version string
	// ModulePath and Files: files of the tool's module (ModulePath at
	// Version, from the module cache), copied next to the binary by the
	// build, at their base names. Default none.
	ModulePath string
	Files      []string
	// BuildIn, when set, is the module (path@version) whose go.mod and go.sum
	// the build resolves Module's dependencies with, instead of Module's own.
	// Default none: `go install Module@Version`.
	BuildIn string
}

// The pinned tools. Bumping a version builds a new binary next to the old one.
var (
	Temporal  = Tool{Name: "temporal", Module: "github.com/temporalio/cli/cmd/temporal", Version: "v1.5.1"}
	VersityGW = Tool{Name: "versitygw", Module: "github.com/versity/versitygw/cmd/versitygw", Version: "v1.8.0"}
	// MinIO is the S3 server most users run. It is AGPL: graft only runs it
	// as a separate process and imports none of its packages.
	MinIO = Tool{Name: "minio", Module: "github.com/minio/minio", Version: "v0.0.0-20260212201848-7aac2a2c5b7c"}
	// TemporalServer is the server docker-compose.yml runs (temporalio/auto-setup
	// at the same version), kept with docker/config_template.yaml, the template
	// the image renders its configuration from; TemporalSQLTool is its schema tool.
	TemporalServer = Tool{Name: "temporal-server", Module: "go.temporal.io/server/cmd/server", Version: "v1.29.1",
		ModulePath: "go.temporal.io/server", Files: []string{"docker/config_template.yaml"}, BuildIn: temporalCLIModule}
	TemporalSQLTool = Tool{Name: "temporal-sql-tool", Module: "go.temporal.io/server/cmd/tools/sql", Version: TemporalServer.Version,
		BuildIn: temporalCLIModule}
)

const temporalCLIModule = "github.com/temporalio/cli@v1.5.1"

// Lanes lists every pinned tool in sequences of builds that can run at once.
// The Temporal server and its schema tool follow the CLI in its lane, so they
// reuse the packages the CLI's build compiled; the two S3 servers share the
// other lane, which keeps the lanes' cold builds of about equal length.
var Lanes = [][]Tool{{Temporal, TemporalServer, TemporalSQLTool}, {VersityGW, MinIO}}

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

// ready reports whether t's binary and every one of its Files are in place.
func (t Tool) ready(path string) bool {
	return isExecutable(path) && !slices.ContainsFunc(t.Files, func(f string) bool {
		_, err := os.Stat(filepath.Join(filepath.Dir(path), filepath.Base(f)))
		return err != nil
	})
}

// Ensure returns the path of t's binary, building it first if it is missing.
// A cold build takes minutes on two cores (docs/benchmarks.md has the
// Temporal server's).
func (t Tool) Ensure(ctx context.Context) (string, error) {
	path, err := t.Path()
	if err != nil || t.ready(path) {
		return path, err
	}
	if err := t.build(ctx, path); err != nil {
		return "", fmt.Errorf("build %s@%s: %w", t.Name, t.Version, err)
	}
	return path, nil
}

func (t Tool) build(ctx context.Context, path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(filepath.Dir(dir), "."+t.Name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	if t.ready(path) { // another process built it while we waited
		return nil
	}
	// The files first: a binary in place means they are too.
	if err := t.copyFiles(ctx, dir); err != nil || isExecutable(path) {
		return err
	}
	// No symbol table or DWARF: nothing debugs these binaries, and the linker
	// of a large one spends much of its time writing them.
	var cmd *exec.Cmd
	if t.BuildIn == "" {
		cmd = exec.CommandContext(ctx, "go", "install", "-ldflags=-s -w", t.Module+"@"+t.Version)
		cmd.Env = append(os.Environ(), "GOBIN="+dir)
	} else {
		work, err := t.contextModule(ctx, dir)
		if err != nil {
			return err
		}
		// -mod=mod: a package the context module's own build never needed may
		// want a go.sum line the copy lacks.
		cmd = exec.CommandContext(ctx, "go", "build", "-mod=mod", "-ldflags=-s -w", "-o", path+".tmp", t.Module)
		cmd.Dir = work
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args[1:], " "), err, out)
	}
	if t.BuildIn != "" {
		return os.Rename(path+".tmp", path)
	}
	if !isExecutable(path) {
		return fmt.Errorf("no binary at %s", path)
	}
	return nil
}

// contextModule writes a module whose requirements are t.BuildIn's — its go.mod
// (renamed) and go.sum — into a directory of the build's own in dir.
func (t Tool) contextModule(ctx context.Context, dir string) (string, error) {
	src, err := moduleDir(ctx, t.BuildIn)
	if err != nil {
		return "", err
	}
	work := filepath.Join(dir, "module")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return "", err
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err == nil && f == "go.mod" {
			b = moduleLine.ReplaceAll(b, []byte("module graft.local/tools/"+t.Name))
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(work, f), b, 0o644)
		}
		if err != nil {
			return "", err
		}
	}
	return work, nil
}

var moduleLine = regexp.MustCompile(`(?m)^module .*$`)

// moduleDir returns the module cache directory of module (path@version),
// downloading it if need be.
func moduleDir(ctx context.Context, module string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module)
	cmd.Dir = os.TempDir() // outside any module
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("download %s: %w\n%s", module, err, out)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("download %s: no module directory in %q (%v)", module, out, err)
	}
	return mod.Dir, nil
}

// copyFiles copies t.Files from the module cache into dir.
func (t Tool) copyFiles(ctx context.Context, dir string) error {
	if len(t.Files) == 0 {
		return nil
	}
	src, err := moduleDir(ctx, t.ModulePath+"@"+t.Version)
	if err != nil {
		return err
	}
	for _, f := range t.Files {
		b, err := os.ReadFile(filepath.Join(src, filepath.FromSlash(f)))
		dst := filepath.Join(dir, filepath.Base(f))
		if err == nil {
			err = os.WriteFile(dst+".tmp", b, 0o644)
		}
		if err == nil {
			err = os.Rename(dst+".tmp", dst)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
