package devstack

import (
	"cmp"
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
	// Port (the frontend's gRPC port at 127.0.0.1) and UIPort (the Web UI's, unless
	// Headless) are insisted on: a server that cannot start on them is an error.
	// Default: free ports.
	Port, UIPort int
	// PreferredPort and PreferredUIPort are tried first when Port and UIPort are 0; a
	// server that does not start on them (taken since the check) starts on free ports.
	PreferredPort, PreferredUIPort int

	Headless  bool   // no Web UI
	DBFile    string // persists the server's state in SQLite; "" keeps it in memory
	Namespace string // created at start; defaults to "default"
	LogFile   string // receives the output; defaults to an in-memory buffer
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
	o.Namespace = cmp.Or(o.Namespace, "default")
	bin, err := tools.Temporal.Ensure(ctx)
	if err != nil {
		return nil, err
	}
	insisted := o.Port != 0 || (o.UIPort != 0 && !o.Headless)
	return retryPorts(!insisted, func(first bool) (*Temporal, error) {
		ports := make([]int, 4)
		for i := range ports {
			if ports[i], err = FreePort(); err != nil {
				return nil, fmt.Errorf("start temporal: %w", err)
			}
		}
		pref, prefUI := o.PreferredPort, o.PreferredUIPort
		if !first {
			pref, prefUI = 0, 0
		}
		port, ui := cmp.Or(o.Port, pref, ports[0]), cmp.Or(o.UIPort, prefUI, ports[3])
		args := []string{"server", "start-dev",
			"--ip", "127.0.0.1", "--port", fmt.Sprint(port),
			"--http-port", fmt.Sprint(ports[1]), "--metrics-port", fmt.Sprint(ports[2]),
			"--namespace", o.Namespace, "--log-level", "warn"}
		uiAddr := ""
		if o.Headless {
			args = append(args, "--headless")
		} else {
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
		hp := hostPort(port)
		p, err := StartProcess(ctx, "temporal", bin, args, nil, o.LogFile, "", time.Minute,
			func(ctx context.Context) error { return probeTemporal(ctx, hp, o.Namespace) })
		if err != nil {
			return nil, err
		}
		return &Temporal{Process: p, HostPort: hp, Namespace: o.Namespace, UIAddress: uiAddr}, nil
	})
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
