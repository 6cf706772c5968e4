// Package checks is an example of a merge check: a Temporal worker of the user's own, on
// its own task queue, whose workflow a merge into a protected branch starts and waits for
// (docs/workflows.md, "Checks"). Its check, graft-example.no-empty-tables, fails a merge
// that would bring into the target a table whose version lists no objects. It reads the
// graph through graft's public read API (client.Reader) on the store graft's workers use.
// cmd/check-worker runs it; its test runs it against `graft dev`.
package checks

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/localfs"
	"github.com/graftworks/graft/storage/s3"
	"github.com/graftworks/graft/workflows/contract"
)

// NoEmptyTablesName is the check's workflow type: the name a branch rule lists
// (`graft branch protect GRAPH BRANCH --check graft-example.no-empty-tables@QUEUE`).
const NoEmptyTablesName = "graft-example.no-empty-tables"

// Checks reads the graphs a check is asked about.
type Checks struct {
	Reader *client.Reader
}

// Register registers the check workflow and its activity on w.
func (c *Checks) Register(w worker.Registry) {
	w.RegisterWorkflowWithOptions(NoEmptyTables, workflow.RegisterOptions{Name: NoEmptyTablesName})
	w.RegisterActivity(c.EmptyTables)
}

// NoEmptyTables is the check workflow graft starts, as a child of a waiting merge, for
// each plan of the merge. Workflow code is deterministic and reads nothing itself: its
// activity reads the store.
func NoEmptyTables(ctx workflow.Context, in contract.CheckInput) (contract.CheckResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 10},
	})
	var c *Checks
	var res contract.CheckResult
	err := workflow.ExecuteActivity(ctx, c.EmptyTables, in).Get(ctx, &res)
	return res, err
}

// EmptyTables fails the merge when a table it would adopt or merge lists no objects in
// the source's version. The source head pins that version, and a waiting merge pins the
// source head, so cleanup keeps it while the check reads.
func (c *Checks) EmptyTables(ctx context.Context, in contract.CheckInput) (contract.CheckResult, error) {
	var empty []string
	checked := 0
	for _, t := range in.Tables {
		if (t.Action != contract.MergeAdopt && t.Action != contract.MergeMerged) || t.Source == "" {
			continue // the target keeps its version, or the source dropped the table
		}
		l, err := c.Reader.TableObjects(ctx, in.Graph, "commit:"+in.SourceHead, t.Table)
		if _, definitive := outcome.Of(err); definitive {
			// not_found, not_retained, …: reading again finds nothing else.
			return contract.CheckResult{}, temporal.NewNonRetryableApplicationError(err.Error(), "read", err)
		} else if err != nil {
			return contract.CheckResult{}, fmt.Errorf("list the objects of table %s: %w", t.Table, err)
		}
		checked++
		if len(l.Objects) == 0 {
			empty = append(empty, fmt.Sprintf("table %s (version %s)", t.Table, l.Version))
		}
	}
	if len(empty) > 0 {
		return contract.CheckResult{Message: fmt.Sprintf("%s on %s lists no objects", strings.Join(empty, ", "), in.Source)}, nil
	}
	return contract.CheckResult{Pass: true, Message: fmt.Sprintf("%d tables checked, none empty", checked)}, nil
}

// Config is where the worker polls and what store it reads.
type Config struct {
	TemporalAddress, Namespace, TaskQueue string
	// StoreDir is a local store, read when S3.Bucket is empty.
	StoreDir string
	S3       s3.Config
}

// Run runs the check worker on cfg.TaskQueue until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	var store storage.Store
	var err error
	if cfg.S3.Bucket != "" {
		store, err = s3.New(ctx, cfg.S3) // credentials: the AWS SDK's default chain
	} else {
		store, err = localfs.Open(cfg.StoreDir)
	}
	if err != nil {
		return err
	}
	tc, err := sdkclient.DialContext(ctx, sdkclient.Options{HostPort: cfg.TemporalAddress, Namespace: cfg.Namespace})
	if err != nil {
		return fmt.Errorf("dial Temporal at %s: %w", cfg.TemporalAddress, err)
	}
	defer tc.Close()
	w := worker.New(tc, cfg.TaskQueue, worker.Options{})
	(&Checks{Reader: client.NewReader(store)}).Register(w)
	if err := w.Start(); err != nil {
		return err
	}
	log.Printf("checks: %s polls task queue %s", NoEmptyTablesName, cfg.TaskQueue)
	<-ctx.Done()
	w.Stop()
	return nil
}
