package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/tools"
	"github.com/graftworks/graft/workflows"
)

// temporalCLI runs the pinned Temporal CLI against p's server, as a service
// written in another language would start graft's workflows: by type name
// and JSON input (docs/workflows.md), with no Go client.
func (p *inProcess) temporalCLI(t *testing.T, args ...string) (stdout string, err error) {
	t.Helper()
	bin, perr := tools.Temporal.Path()
	if perr != nil {
		t.Fatal(perr)
	}
	if _, serr := os.Stat(bin); serr != nil {
		t.Fatalf("the Temporal CLI is not built at %s: %v", bin, serr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(args, "--address", p.env["GRAFT_TEMPORAL_ADDRESS"], "--namespace", p.env["GRAFT_NAMESPACE"])...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("temporal %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String(), nil
}

// startByCLI starts workflow type with the JSON input and returns the
// workflow's outcome and its result object, read from `temporal workflow
// result -o json`: from the completion, or — a non-success outcome, per
// docs/workflows.md — from the failure's application error, whose type is the
// outcome and whose first detail is the result.
func (p *inProcess) startByCLI(t *testing.T, workflowType, workflowID string, input map[string]any) (string, map[string]any) {
	t.Helper()
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.temporalCLI(t, "workflow", "start", "--type", workflowType, "--task-queue", p.env["GRAFT_TASK_QUEUE"],
		"--workflow-id", workflowID, "--input", string(in)); err != nil {
		t.Fatal(err)
	}
	out, err := p.temporalCLI(t, "workflow", "result", "--workflow-id", workflowID, "-o", "json")
	// The CLI prints the close event with payloads decoded to JSON.
	type failure struct {
		Message                string `json:"message"`
		ApplicationFailureInfo *struct {
			Type    string            `json:"type"`
			Details []json.RawMessage `json:"details"`
		} `json:"applicationFailureInfo"`
	}
	var res struct {
		Status     string          `json:"status"`
		Result     json.RawMessage `json:"result"`
		CloseEvent struct {
			Failed *struct {
				Failure failure `json:"failure"`
			} `json:"workflowExecutionFailedEventAttributes"`
		} `json:"closeEvent"`
	}
	if jerr := json.Unmarshal([]byte(out), &res); jerr != nil {
		t.Fatalf("temporal workflow result: %v (%v)\n%s", jerr, err, out)
	}
	var result map[string]any
	switch {
	case res.Status == "COMPLETED":
		if err := json.Unmarshal(res.Result, &result); err != nil {
			t.Fatalf("completed result is not a JSON object: %v\n%s", err, out)
		}
		return fmt.Sprint(result["outcome"]), result
	case res.Status == "FAILED" && res.CloseEvent.Failed != nil && res.CloseEvent.Failed.Failure.ApplicationFailureInfo != nil &&
		len(res.CloseEvent.Failed.Failure.ApplicationFailureInfo.Details) > 0:
		info := res.CloseEvent.Failed.Failure.ApplicationFailureInfo
		if err := json.Unmarshal(info.Details[0], &result); err != nil {
			t.Fatalf("failure detail is not the result object: %v\n%s", err, out)
		}
		if info.Type != fmt.Sprint(result["outcome"]) {
			t.Fatalf("failure type %q, result outcome %v: they must agree\n%s", info.Type, result["outcome"], out)
		}
		return info.Type, result
	}
	t.Fatalf("workflow %s neither completed nor failed with an outcome (%v):\n%s", workflowID, err, out)
	return "", nil
}

// TestOtherLanguages_CreateAndMergeStartedThroughTheTemporalCLI_JSONResults
// proves docs/workflows.md's promise to services in other languages: the
// pinned Temporal CLI — no Go client — starts graft.CreateBranch and
// graft.Merge by type name with JSON input, and reads their JSON results; a
// create of a live branch reads as conflict with its result object.
func TestOtherLanguages_CreateAndMergeStartedThroughTheTemporalCLI_JSONResults(t *testing.T) {
	p := newInProcess(t)
	wantCode(t, p.run(t, "graph", "init", "g"), 0)

	out, res := p.startByCLI(t, "graft.CreateBranch", "graft/create-branch/g/feature/cli",
		map[string]any{"graph": "g", "branch": "feature/cli", "op_id": "cli-create-1", "author": "a python service"})
	if out != "created" || res["op_id"] != "cli-create-1" || !strings.HasPrefix(fmt.Sprint(res["native"]), "feature/cli.") || res["head"] == nil {
		t.Fatalf("create through the Temporal CLI: %s %v", out, res)
	}
	r := p.run(t, "branch", "show", "g", "feature/cli", "-o", "json")
	wantCode(t, r, 0)

	file := filepath.Join(t.TempDir(), "orders.csv")
	if err := os.WriteFile(file, []byte("id\n1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantCode(t, p.run(t, "table", "write", "g", "feature/cli", "orders", file), 0)
	out, res = p.startByCLI(t, "graft.Merge", "graft/merge/g/main/cli-merge-1",
		map[string]any{"graph": "g", "source": "feature/cli", "target": "main", "op_id": "cli-merge-1"})
	tables, _ := res["tables"].([]any)
	if (out != "adopted" && out != "merged") || res["commit"] == nil || len(tables) != 1 {
		t.Fatalf("merge through the Temporal CLI: %s %v", out, res)
	}
	r = p.run(t, "branch", "show", "g", "main", "-o", "json")
	wantStdout(t, r, fmt.Sprint(res["commit"]))

	out, res = p.startByCLI(t, "graft.CreateBranch", "graft/create-branch/g/feature/cli",
		map[string]any{"graph": "g", "branch": "feature/cli", "op_id": "cli-create-2"})
	if out != "conflict" || res["op_id"] != "cli-create-2" || res["message"] == "" {
		t.Fatalf("create of a live branch through the Temporal CLI: %s %v; want conflict with its result", out, res)
	}

	// The failed-workflow shape of a non-success outcome reads the same way:
	// a stand-in create on a queue of its own fails as docs/workflows.md says.
	stub := *p
	stub.env = maps.Clone(p.env)
	stub.env["GRAFT_TASK_QUEUE"] += "-stub"
	tc, err := sdkclient.Dial(sdkclient.Options{HostPort: p.env["GRAFT_TEMPORAL_ADDRESS"], Namespace: p.env["GRAFT_NAMESPACE"],
		Logger: sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	w := sdkworker.New(tc, stub.env["GRAFT_TASK_QUEUE"], sdkworker.Options{})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, in workflows.CreateBranchInput) (workflows.CreateBranchResult, error) {
		res := workflows.CreateBranchResult{Outcome: outcome.Conflict, OpID: in.OpID, Graph: in.Graph, Branch: in.Branch, Message: "branch is live"}
		return workflows.CreateBranchResult{}, temporal.NewNonRetryableApplicationError(res.Message, string(res.Outcome), nil, res)
	}, workflow.RegisterOptions{Name: workflows.CreateBranchName})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	out, res = stub.startByCLI(t, "graft.CreateBranch", "graft/create-branch/g/stub", map[string]any{"graph": "g", "branch": "stub", "op_id": "cli-stub"})
	if out != "conflict" || res["op_id"] != "cli-stub" || res["message"] != "branch is live" {
		t.Fatalf("a failed-shape conflict through the Temporal CLI: %s %v", out, res)
	}
}
