package workercmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/testenv"
)

// testConfig is a worker configuration against the shared dev server, a fresh
// schema, a fresh store directory and a task queue of its own.
func testConfig(t *testing.T, ts *testenv.TemporalServer) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.TemporalAddress = ts.HostPort
	cfg.Namespace = ts.Namespace
	cfg.TaskQueue = uniqueName("graft-test-")
	cfg.StoreDir = t.TempDir()
	cfg.DatabaseURL = catalogtest.DatabaseURL()
	cfg.DBSchema = catalogtest.NewSchema(t)
	cfg.MetricsAddr = ""
	cfg.ShutdownTimeout = 20 * time.Second
	return cfg
}

// sleeper is a test activity that takes two seconds, honouring cancellation,
// and counts how each execution ended.
type sleeper struct {
	started              chan struct{}
	completed, cancelled atomic.Int32
}

const (
	sleepWorkflowName = "graft-test-sleep"
	sleepActivityName = "graft-test-sleep-activity"
	sleepFor          = 2 * time.Second
)

func (s *sleeper) Sleep(ctx context.Context) (string, error) {
	s.started <- struct{}{}
	select {
	case <-time.After(sleepFor):
		s.completed.Add(1)
		return "slept", nil
	case <-ctx.Done():
		s.cancelled.Add(1)
		return "", ctx.Err()
	}
}

func sleepWorkflow(ctx workflow.Context) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var out string
	err := workflow.ExecuteActivity(ctx, sleepActivityName).Get(ctx, &out)
	return out, err
}

func (s *sleeper) register(r sdkworker.Registry) {
	r.RegisterWorkflowWithOptions(sleepWorkflow, workflow.RegisterOptions{Name: sleepWorkflowName})
	r.RegisterActivityWithOptions(s.Sleep, activity.RegisterOptions{Name: sleepActivityName})
}

// startRun runs a worker in-process; the returned stop cancels it (what
// SIGTERM does) and returns Run's error.
func startRun(t *testing.T, cfg Config, register func(sdkworker.Registry)) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, testLogger(t), register) }()
	var err error
	stopped := false
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case err = <-done:
			case <-time.After(cfg.ShutdownTimeout + 10*time.Second):
				err = errors.New("Run did not return after its context was cancelled")
			}
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestRun_CancelledWhileActivityRuns_ActivityFinishesAndWorkflowCompletesOnce(t *testing.T) {
	ts := testenv.Temporal(t)
	cfg := testConfig(t, ts)
	s := &sleeper{started: make(chan struct{}, 4)}

	stop := startRun(t, cfg, s.register)
	tc, err := client.Dial(client.Options{HostPort: ts.HostPort, Namespace: ts.Namespace})
	if err != nil {
		t.Fatalf("dial temporal: %v", err)
	}
	defer tc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: uniqueName("graft-test-sleep-"), TaskQueue: cfg.TaskQueue,
	}, sleepWorkflowName)
	if err != nil {
		t.Fatalf("start workflow: %v", err)
	}
	select {
	case <-s.started:
	case <-ctx.Done():
		t.Fatal("the activity never started")
	}

	began := time.Now()
	if err := stop(); err != nil { // what SIGTERM does
		t.Fatalf("Run after cancel: %v", err)
	}
	if took := time.Since(began); took < sleepFor/2 {
		t.Errorf("Run returned %s after cancel: it did not wait for the running activity", took)
	}
	if c, x := s.completed.Load(), s.cancelled.Load(); c != 1 || x != 0 {
		t.Fatalf("when Run returned: %d completed, %d cancelled; want the activity completed, not cancelled", c, x)
	}

	// A fresh worker takes the workflow over; the activity's result was
	// reported before the first one stopped, so it does not run again.
	startRun(t, testConfigLike(cfg), s.register)
	var out string
	if err := run.Get(ctx, &out); err != nil {
		t.Fatalf("workflow result: %v", err)
	}
	if out != "slept" {
		t.Errorf("workflow returned %q, want the activity's %q", out, "slept")
	}
	if c, x := s.completed.Load(), s.cancelled.Load(); c != 1 || x != 0 {
		t.Errorf("after the workflow completed: activity completed %d times, cancelled %d; want once and never", c, x)
	}
}

// testConfigLike is cfg for a second worker on the same task queue, schema
// and store.
func testConfigLike(cfg Config) Config {
	cfg.Migrate = false
	return cfg
}

func TestExecute_TemporalRefusesConnections_FailsFastNamingAddress(t *testing.T) {
	ts := &testenv.TemporalServer{HostPort: freeAddr(t), Namespace: "default"}
	cfg := testConfig(t, ts)
	code, stderr, took := executeRun(t, cfg, "--dial-timeout", "5s")
	if code != ExitFailure {
		t.Errorf("exit code = %d, want %d", code, ExitFailure)
	}
	if !strings.Contains(stderr, "dial temporal at "+ts.HostPort) {
		t.Errorf("stderr does not name the address %s:\n%s", ts.HostPort, stderr)
	}
	if took > 5*time.Second {
		t.Errorf("took %s to fail against a refused port", took)
	}
}

func TestExecute_TemporalNeverAnswers_FailsAfterDialTimeoutNamingAddress(t *testing.T) {
	// A listener that accepts and then says nothing, like a black-holed server.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	ts := &testenv.TemporalServer{HostPort: l.Addr().String(), Namespace: "default"}
	code, stderr, took := executeRun(t, testConfig(t, ts), "--dial-timeout", "2s")
	if code != ExitFailure {
		t.Errorf("exit code = %d, want %d", code, ExitFailure)
	}
	if !strings.Contains(stderr, "dial temporal at "+ts.HostPort+": no answer within 2s") {
		t.Errorf("stderr does not say the dial to %s timed out:\n%s", ts.HostPort, stderr)
	}
	if took > 8*time.Second {
		t.Errorf("took %s with --dial-timeout 2s", took)
	}
}

func TestExecute_PostgresUnreachable_ExitsOneNamingRedactedURL(t *testing.T) {
	for _, migrate := range []bool{true, false} {
		t.Run(fmt.Sprintf("migrate=%v", migrate), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.StoreDir = t.TempDir()
			cfg.MetricsAddr = ""
			cfg.TemporalAddress = freeAddr(t)
			cfg.DatabaseURL = catalogtest.UnreachableURL(t)
			cfg.Migrate = migrate
			code, stderr, _ := executeRun(t, cfg)
			if code != ExitFailure {
				t.Errorf("exit code = %d, want %d", code, ExitFailure)
			}
			wantRedactedURL(t, stderr, cfg.DatabaseURL)
		})
	}
}

// executeRun runs `graft-worker run` in-process with cfg expressed as flags
// and DATABASE_URL, and returns the exit code, stderr and how long it took.
func executeRun(t *testing.T, cfg Config, extra ...string) (int, string, time.Duration) {
	t.Helper()
	args := append([]string{"run",
		"--temporal-address", cfg.TemporalAddress, "--namespace", cfg.Namespace,
		"--task-queue", cfg.TaskQueue, "--store-dir", cfg.StoreDir, "--db-schema", cfg.DBSchema,
		"--metrics-addr", cfg.MetricsAddr, fmt.Sprintf("--migrate=%v", cfg.Migrate),
	}, extra...)
	var stdout, stderr bytes.Buffer
	began := time.Now()
	code := Execute(context.Background(), args, envMap(map[string]string{"DATABASE_URL": cfg.DatabaseURL}), &stdout, &stderr)
	return code, stderr.String(), time.Since(began)
}

func TestExecute_SchemaNotMigratedAndMigrateOff_ExitsOneSayingRunMigrations(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StoreDir = t.TempDir()
	cfg.MetricsAddr = ""
	cfg.TemporalAddress = freeAddr(t)
	cfg.DatabaseURL = catalogtest.DatabaseURL()
	cfg.DBSchema = catalogtest.NewSchema(t)
	cfg.Migrate = false
	code, stderr, _ := executeRun(t, cfg)
	if code != ExitFailure || !strings.Contains(stderr, "run the migrations") || !strings.Contains(stderr, cfg.DBSchema) {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1 saying schema %s needs its migrations", code, stderr, cfg.DBSchema)
	}
}

func TestExecute_MetricsAddressInUse_ExitsOneNamingTheFlag(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := DefaultConfig()
	cfg.StoreDir = t.TempDir()
	cfg.MetricsAddr = l.Addr().String()
	cfg.DatabaseURL = catalogtest.UnreachableURL(t)
	code, stderr, _ := executeRun(t, cfg)
	if code != ExitFailure || !strings.Contains(stderr, "listen for metrics on "+cfg.MetricsAddr+" (--metrics-addr)") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1 naming --metrics-addr %s", code, stderr, cfg.MetricsAddr)
	}
}

func TestRun_CancelledDuringStartup_ReturnsNil(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StoreDir = t.TempDir()
	cfg.MetricsAddr = ""
	cfg.DatabaseURL = catalogtest.DatabaseURL()
	cfg.DBSchema = catalogtest.NewSchema(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // SIGTERM before the worker got going
	if err := Run(ctx, cfg, testLogger(t), nil); err != nil {
		t.Errorf("Run = %v, want nil: a stop requested during startup is graceful", err)
	}
}
