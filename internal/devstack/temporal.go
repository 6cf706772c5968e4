package devstack

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/graftworks/graft/internal/searchattr"
	"github.com/graftworks/graft/internal/tools"
)

// TemporalOptions configure a Temporal CLI dev server.
type TemporalOptions struct {
	// Port is the frontend gRPC port at 127.0.0.1, insisted on: a server that
	// cannot start on it is an error. Defaults to a free port.
	Port int
	// UIPort serves the Web UI when Headless is false, insisted on like Port.
	// Defaults to a free port.
	UIPort int
	// PreferredPort and PreferredUIPort are tried first when Port and UIPort
	// are 0; a server that does not start on them is started again on free
	// ports (the port may have been taken between the check and the start).
	// Defaults to none.
	PreferredPort, PreferredUIPort int
	// Headless turns the Web UI off. Defaults to false.
	Headless bool
	// DBFile persists the server's state in SQLite. Defaults to "" (in memory).
	DBFile string
	// Namespace is created at start. Defaults to "default".
	Namespace string
	// LogFile receives the server's output. Defaults to an in-memory buffer.
	LogFile string
}

// Temporal is a running dev server.
type Temporal struct {
	*Process
	HostPort  string
	Namespace string
	UIAddress string // "" when headless
}

// DynamicConfig is what graft asks of the dev server: eager workflow start and
// eager activity execution avoid a matching round trip per task (docs/benchmarks.md).
var DynamicConfig = []string{
	"system.enableEagerWorkflowStart=true",
	"system.enableActivityEagerExecution=true",
	"frontend.enableUpdateWorkflowExecution=true",
}

// StartTemporal builds the Temporal CLI if needed, starts its dev server with
// graft's search attributes registered, and waits until the namespace answers.
func StartTemporal(ctx context.Context, o TemporalOptions) (*Temporal, error) {
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	bin, err := tools.Temporal.Ensure(ctx)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ports := make([]int, 3)
		for i := range ports {
			if ports[i], err = FreePort(); err != nil {
				return nil, fmt.Errorf("start temporal: %w", err)
			}
		}
		port, httpPort, metricsPort := ports[0], ports[1], ports[2]
		if o.Port != 0 {
			port = o.Port
		} else if attempt == 0 && o.PreferredPort != 0 {
			port = o.PreferredPort
		}
		args := []string{"server", "start-dev",
			"--ip", "127.0.0.1", "--port", fmt.Sprint(port),
			"--http-port", fmt.Sprint(httpPort), "--metrics-port", fmt.Sprint(metricsPort),
			"--namespace", o.Namespace, "--log-level", "warn"}
		uiAddr := ""
		if o.Headless {
			args = append(args, "--headless")
		} else {
			ui := o.UIPort
			if ui == 0 && attempt == 0 {
				ui = o.PreferredUIPort
			}
			if ui == 0 {
				if ui, err = FreePort(); err != nil {
					return nil, fmt.Errorf("start temporal: %w", err)
				}
			}
			args = append(args, "--ui-ip", "127.0.0.1", "--ui-port", fmt.Sprint(ui))
			uiAddr = "http://" + hostPort(ui)
		}
		if o.DBFile != "" {
			args = append(args, "--db-filename", o.DBFile)
		}
		for _, sa := range searchattr.All {
			args = append(args, "--search-attribute", sa.Name+"="+sa.Type)
		}
		for _, dc := range DynamicConfig {
			args = append(args, "--dynamic-config-value", dc)
		}
		p, err := startProcess("temporal", bin, args, nil, o.LogFile, "")
		if err != nil {
			return nil, err
		}
		hp := hostPort(port)
		err = p.waitReady(ctx, 60*time.Second, func(ctx context.Context) error {
			return probeTemporal(ctx, hp, o.Namespace)
		})
		if err == nil {
			return &Temporal{Process: p, HostPort: hp, Namespace: o.Namespace, UIAddress: uiAddr}, nil
		}
		p.Stop(10 * time.Second)
		lastErr = err
		if o.Port != 0 || (o.UIPort != 0 && !o.Headless) {
			break
		}
	}
	return nil, lastErr
}

func probeTemporal(ctx context.Context, hostPort, namespace string) error {
	c, err := client.DialContext(ctx, client.Options{HostPort: hostPort, Namespace: namespace, Logger: QuietLogger})
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace}); err != nil {
		return err
	}
	// DescribeNamespace reads the namespace's record; starting a workflow looks the name
	// up in the frontend's namespace cache, which a fresh server fills later ("Namespace
	// default is not found", seen by the soak right after a start). A task-queue call
	// takes that lookup too: ready means both answer.
	_, err = c.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{Namespace: namespace,
		TaskQueue: &taskqueuepb.TaskQueue{Name: "graft-readiness-probe"}})
	return err
}

// QuietLogger drops the SDK's log lines, e.g. while probing a server that is
// still starting.
var QuietLogger = sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
