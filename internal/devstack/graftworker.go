package devstack

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/graftworks/graft/internal/tools"
)

// BuildGraftWorker builds the graft-worker binary (cmd/worker) of the module
// the working directory is in into dir and returns its path.
func BuildGraftWorker(ctx context.Context, dir string) (string, error) {
	root, err := tools.ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "graft-worker")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/worker")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/worker: %w\n%s", err, out)
	}
	return bin, nil
}

// GraftWorkerOptions configure a graft-worker process.
type GraftWorkerOptions struct {
	Binary string // the graft-worker executable (BuildGraftWorker); required
	// Env configures the worker as docker-compose.yml does (GRAFT_*, DATABASE_URL,
	// AWS_*); the harness sets GRAFT_METRICS_ADDR to a free port on 127.0.0.1.
	Env     []string
	LogFile string // receives the JSON log lines; defaults to an in-memory buffer
}

// GraftWorker is a running graft-worker process.
type GraftWorker struct {
	*Process
	// MetricsAddr serves /metrics and /healthz.
	MetricsAddr string
	o           GraftWorkerOptions
}

// StartGraftWorker starts `graft-worker run` and waits until /healthz
// answers 200: it polls its task queue and its ledger answers.
func StartGraftWorker(ctx context.Context, o GraftWorkerOptions) (*GraftWorker, error) {
	w := &GraftWorker{o: o}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// Start starts the worker again after it stopped (Stop, Kill or a crash),
// with the same configuration and a fresh metrics port.
func (w *GraftWorker) Start(ctx context.Context) error {
	if w.Process != nil && !w.Exited() {
		return fmt.Errorf("graft-worker (pid %d) is still running", w.Pid())
	}
	_, err := retryPorts(true, func(bool) (*Process, error) {
		port, err := FreePort()
		if err != nil {
			return nil, fmt.Errorf("start graft-worker: %w", err)
		}
		addr := hostPort(port)
		p, err := StartProcess(ctx, "graft-worker", w.o.Binary, []string{"run"},
			append(append([]string(nil), w.o.Env...), "GRAFT_METRICS_ADDR="+addr), w.o.LogFile, "", time.Minute,
			func(ctx context.Context) error {
				resp, err := get(ctx, "http://"+addr+"/healthz")
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("/healthz: %s", resp.Status)
				}
				return err
			})
		if err == nil {
			w.Process, w.MetricsAddr = p, addr
		}
		return p, err
	})
	return err
}

// Terminate sends SIGTERM, as an orchestrator stopping a replica does, and
// waits up to timeout for the worker to exit; it returns how it exited (nil
// for status 0). A worker still running after timeout is killed.
func (w *GraftWorker) Terminate(timeout time.Duration) error {
	w.Stop(timeout)
	return w.Wait(0)
}

// String names the worker by pid, for messages.
func (w *GraftWorker) String() string {
	if w.Process == nil {
		return "graft-worker (not started)"
	}
	return "graft-worker pid " + strconv.Itoa(w.Pid())
}
