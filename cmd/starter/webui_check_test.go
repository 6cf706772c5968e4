//go:build webui

package main

// The Web UI check runs in a real browser: Debian's chromium, headless. It is
// its own tier (`go test -tags webui`, or scripts/webui-check.sh) because it
// needs chromium; the README's test command runs it, installing Debian's
// chromium where it may. It proves contract 2 of docs/workflows.md where an
// operator sees it: a conflicting create reads "Failed", a created one
// "Completed".

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"
)

// chromium runs Debian's headless chromium with a fresh profile and no
// background traffic, and returns its stdout.
func chromium(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (apt-get install chromium): %v", err)
	}
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir=" + t.TempDir(),
		"--virtual-time-budget=15000", "--window-size=1600,1000"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errOut.String())
	}
	return out.String()
}

// TestWebUI_ConflictingCreate_IsVisiblyDistinctFromACreatedOne starts graft
// dev with its Web UI, makes one create that ends created and one that ends
// conflict (the same name again), loads the UI's workflow list in headless
// chromium and checks the two runs' rows show different statuses. It saves a
// screenshot of the list ($GRAFT_WEBUI_SCREENSHOT, default
// .cache/webui-workflows.png at the module root).
func TestWebUI_ConflictingCreate_IsVisiblyDistinctFromACreatedOne(t *testing.T) {
	bin := buildGraft(t)
	d := startDev(t, bin)
	run := func(args ...string) result { return runGraft(t, bin, d.env, args...) }
	wantCode(t, run("graph", "init", "ui"), 0)
	wantCode(t, run("branch", "create", "ui", "feature/seen"), 0)
	if r := run("branch", "create", "ui", "feature/seen"); r.code != 5 {
		t.Fatalf("the second create: want exit 5 (conflict)\n%s", r)
	}

	// The two runs of the create's workflow id, and what Temporal says they are.
	tc, err := sdkclient.Dial(sdkclient.Options{HostPort: d.info.TemporalAddress, Namespace: d.info.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	id := "graft/create-branch/ui/feature/seen"
	var runs []string
	deadline := time.Now().Add(30 * time.Second)
	for len(runs) < 2 && time.Now().Before(deadline) {
		resp, err := tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: d.info.Namespace,
			Query: fmt.Sprintf("WorkflowId = %q", id)})
		if err != nil {
			t.Fatal(err)
		}
		runs = runs[:0]
		for _, e := range resp.GetExecutions() {
			runs = append(runs, e.GetExecution().GetRunId())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(runs) != 2 {
		t.Fatalf("visibility lists %d runs of %s, want 2", len(runs), id)
	}

	list := strings.TrimRight(d.info.UI, "/") + "/namespaces/" + d.info.Namespace + "/workflows"
	dom := chromium(t, "--dump-dom", list)
	statuses := map[string]string{}
	status := regexp.MustCompile(`\b(Completed|Failed|Running|Terminated|Canceled|Timed Out)\b`)
	for _, row := range strings.Split(dom, "<tr") {
		for _, r := range runs {
			// The full run id: Temporal's run ids are time-ordered, so two runs
			// started a moment apart share their first characters.
			if strings.Contains(row, r) {
				if m := status.FindString(stripTags(row)); m != "" {
					statuses[r] = m
				}
			}
		}
	}
	shot := os.Getenv("GRAFT_WEBUI_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(repoRoot(t), ".cache", "webui-workflows.png")
	}
	if err := os.MkdirAll(filepath.Dir(shot), 0o755); err != nil {
		t.Fatal(err)
	}
	chromium(t, "--screenshot="+shot, list)
	t.Logf("the UI's workflow list: %s; statuses by run: %v; screenshot: %s", list, statuses, shot)
	if len(statuses) != 2 {
		t.Fatalf("found the status of %d of the 2 runs in the rendered list (%v)", len(statuses), statuses)
	}
	if statuses[runs[0]] == statuses[runs[1]] {
		t.Fatalf("the created and the conflicting create both read %q in the Web UI's list", statuses[runs[0]])
	}
}

var tag = regexp.MustCompile(`<[^>]*>`)

func stripTags(s string) string { return tag.ReplaceAllString(s, " ") }
