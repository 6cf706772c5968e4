package workercmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/migrations"
	"github.com/graftworks/graft/worker"
)

// metricsShutdownTimeout bounds closing the metrics server's connections.
const metricsShutdownTimeout = 5 * time.Second

// Run runs a worker until ctx is cancelled, then stops it gracefully: polling
// stops, running activities get cfg.ShutdownTimeout to finish and report, and
// the Temporal client, the ledger and the metrics server are closed. It
// returns nil after a graceful stop, including a cancellation during startup,
// and an error naming what failed when the worker could not start or stopped
// on a fatal error. cfg is expected to be valid (LoadConfig checks it).
// register, when not nil, registers more workflows and activities beside
// graft's.
func Run(ctx context.Context, cfg Config, log *slog.Logger, register func(sdkworker.Registry)) error {
	err := run(ctx, cfg, log, register)
	if err != nil && ctx.Err() != nil {
		log.Info("stopped during startup", "reason", context.Cause(ctx).Error(), "startup_error", err.Error())
		return nil
	}
	return err
}

// NewLogger returns a JSON logger writing to w.
func NewLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

func run(ctx context.Context, cfg Config, log *slog.Logger, register func(sdkworker.Registry)) error {
	metrics := NewMetrics()
	health := &health{}
	log.Info("starting graft worker",
		"temporal_address", cfg.TemporalAddress, "namespace", cfg.Namespace, "task_queue", cfg.TaskQueue,
		"tls", cfg.TLS.On(), "store", cfg.DescribeStore(), "database", catalog.RedactURL(cfg.DatabaseURL),
		"db_schema", cfg.DBSchema, "migrate", cfg.Migrate, "shutdown_timeout", cfg.ShutdownTimeout.String())

	if cfg.MetricsAddr != "" {
		stop, err := serveMetrics(cfg.MetricsAddr, metrics, health, log)
		if err != nil {
			return err
		}
		defer stop()
	}

	if cfg.Migrate {
		applied, err := migrations.Apply(ctx, cfg.DatabaseURL, cfg.DBSchema)
		if err != nil {
			return err
		}
		log.Info("migrations applied", "applied", applied, "latest", migrations.Latest())
	}

	cat, err := catalog.Open(ctx, catalog.Config{DatabaseURL: cfg.DatabaseURL, Schema: cfg.DBSchema})
	if err != nil {
		return err
	}
	defer cat.Close()
	health.catalog.Store(cat)
	defer health.catalog.Store(nil) // runs before Close
	metrics.AttachLedger(cat)
	defer metrics.AttachLedger(nil)

	store, err := cfg.OpenStore(ctx)
	if err != nil {
		return err
	}

	copts, err := cfg.ClientOptions(client.Options{
		Logger:         sdklog.NewStructuredLogger(log.With("component", "temporal-sdk")),
		MetricsHandler: metrics.SDKHandler(),
	})
	if err != nil {
		return err
	}
	tc, err := cfg.DialTemporal(ctx, copts)
	if err != nil {
		return err
	}
	defer tc.Close()

	fatal := make(chan error, 1)
	acts := &activities.Activities{Store: store, Catalog: cat, Observer: metrics, Workflows: worker.TemporalWorkflows(tc),
		Chunks: graph.NewChunkCache(graph.DefaultChunkCacheBytes)}
	w := worker.New(tc, cfg.TaskQueue, acts, sdkworker.Options{
		MaxConcurrentActivityExecutionSize:      cfg.MaxConcurrentActivities,
		MaxConcurrentLocalActivityExecutionSize: cfg.MaxConcurrentLocalActivities,
		MaxConcurrentWorkflowTaskExecutionSize:  cfg.MaxConcurrentWorkflowTasks,
		WorkerStopTimeout:                       cfg.ShutdownTimeout,
		OnFatalError: func(err error) {
			select {
			case fatal <- err:
			default:
			}
		},
	})
	if register != nil {
		register(w)
	}
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker on %s, namespace %s, task queue %s: %w",
			cfg.TemporalAddress, cfg.Namespace, cfg.TaskQueue, err)
	}
	health.worker.Store("running")
	log.Info("worker started", "task_queue", cfg.TaskQueue)
	if err := worker.EnsureSchedules(ctx, tc, worker.ScheduleOptions{TaskQueue: cfg.TaskQueue}); err != nil {
		log.Warn("could not create graft's schedules; the reconciler runs only on demand", "err", err.Error())
	}

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("stopping: no new tasks; waiting for running activities",
			"reason", context.Cause(ctx).Error(), "shutdown_timeout", cfg.ShutdownTimeout.String())
	case err := <-fatal:
		runErr = fmt.Errorf("worker stopped on a fatal error: %w", err)
		log.Error("stopping on a fatal error", "err", err.Error())
	}
	health.worker.Store("stopping")
	began := time.Now()
	w.Stop()
	log.Info("worker stopped", "took", time.Since(began).String())
	return runErr
}

// serveMetrics serves /metrics and /healthz on addr until stop is called.
func serveMetrics(addr string, m *Metrics, h *health, log *slog.Logger) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics on %s (--metrics-addr): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.Handle("GET /healthz", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", "err", err.Error())
		}
	}()
	log.Info("serving metrics and health", "addr", l.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), metricsShutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
