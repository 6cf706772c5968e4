package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/graftworks/graft/client/outcome"
)

// runOffline runs graft through Execute with Temporal at an address where
// nothing listens and no store or ledger configured usefully: a command
// that contacted anything would exit 9, so exit 2 proves the input was
// rejected locally.
func runOffline(t *testing.T, args ...string) result {
	t.Helper()
	env := map[string]string{"GRAFT_TEMPORAL_ADDRESS": closedAddr(t), "GRAFT_DIAL_TIMEOUT": "2s", "GRAFT_STORE_DIR": t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := Execute(ctx, args, envOf(env), &stdout, &stderr)
	return result{args: args, stdout: stdout.String(), stderr: stderr.String(), code: code}
}

const (
	goodCommit = "01JD5ZQ3W4E8Y2N6M0K1R7T9VX-7-0123456789abcdef0123456789abcdef"
	goodOp     = "01JD5ZQ3W4E8Y2N6M0K1R7T9VX"
)

func TestNewCommands_BadFlagsAndNames_AreInvalidBeforeAnythingIsContacted(t *testing.T) {
	for _, c := range []struct {
		args      []string
		fragments []string
	}{
		// restore
		{[]string{"restore", "g", "main", "--commit", goodCommit, "--tag", "v1"}, []string{"exactly one of --commit and --tag"}},
		{[]string{"restore", "g", "main"}, []string{"exactly one of --commit and --tag"}},
		{[]string{"restore", "g", "main", "--commit", "not-a-commit"}, []string{"--commit", "commit id"}},
		{[]string{"restore", "g", "main", "--tag", "a..b"}, []string{"--tag", "tag name"}},
		{[]string{"restore", "g", "main", "--tag", "v1", "--no-backup", "--backup-tag", "b"}, []string{"--no-backup and --backup-tag"}},
		{[]string{"restore", "g", "main", "--tag", "v1", "--backup-tag", "bad tag"}, []string{"--backup-tag", "tag name"}},
		{[]string{"restore", "g", "main", "--tag", "v1", "--expected-head", "x"}, []string{"--expected-head"}},
		{[]string{"restore", "g", "a//b", "--tag", "v1"}, []string{"branch name"}},
		{[]string{"restore", "g"}, []string{"takes 2 argument(s) (GRAPH BRANCH)"}},
		// merge
		{[]string{"merge", "g", "main"}, []string{`cannot merge "main" into itself`}},
		{[]string{"merge", "g", "feature/x", "--into", "a..b"}, []string{"--into", "branch name"}},
		{[]string{"merge", "Bad Graph", "feature/x"}, []string{"graph name"}},
		{[]string{"merge", "g", "feature/x", "--expected-head", "nope"}, []string{"--expected-head", "commit id"}},
		{[]string{"merge", "g", "feature/x", "--idempotency-key", "not an op id"}, []string{"--idempotency-key", "operation id"}},
		{[]string{"merge", "g", "feature/x", "--author", "a\x00b"}, []string{"--author"}},
		{[]string{"merge", "g"}, []string{"takes 2 argument(s) (GRAPH SOURCE)"}},
		// branch delete
		{[]string{"branch", "delete", "g", "main"}, []string{"main cannot be deleted", "graft restore g main"}},
		{[]string{"branch", "delete", "g", "x.json"}, []string{"branch name"}},
		// tags
		{[]string{"tag", "create", "g", "v1", "--commit", goodCommit, "--branch", "main"}, []string{"at most one of --commit and --branch"}},
		{[]string{"tag", "create", "g", "v1", "--commit", "zzz"}, []string{"--commit", "commit id"}},
		{[]string{"tag", "create", "g", "v1", "--branch", "a//b"}, []string{"--branch", "branch name"}},
		{[]string{"tag", "create", "g", "bad tag"}, []string{"tag name"}},
		{[]string{"tag", "show", "g", "a..b"}, []string{"tag name"}},
		{[]string{"tag", "delete", "g", "v1", "--idempotency-key", "x y"}, []string{"--idempotency-key"}},
		{[]string{"tag", "list", "Bad Graph"}, []string{"graph name"}},
		{[]string{"tag", "frobnicate"}, []string{`unknown command "frobnicate" for "graft tag"`}},
	} {
		wantText(t, runOffline(t, c.args...), 2, "invalid", c.fragments...)
	}
}

func TestRestore_BothCommitAndTag_JSONErrorIsInvalid(t *testing.T) {
	r := runOffline(t, "restore", "g", "main", "--commit", goodCommit, "--tag", "v1", "-o", "json")
	rep := jsonErr(t, r)
	if rep.Outcome != "invalid" || rep.ExitCode != 2 || rep.OpID != "" || len(rep.Conflicts) != 0 {
		t.Fatalf("report %+v", rep)
	}
}

func TestNewCommands_GoodInput_ReachesTemporal(t *testing.T) {
	// The same commands with valid input pass the local checks and then
	// find nothing at the Temporal address: unavailable (9), not invalid.
	for _, args := range [][]string{
		{"merge", "g", "feature/x", "--expected-head", goodCommit, "--idempotency-key", goodOp},
		{"restore", "g", "main", "--tag", "v1", "--backup-tag", "before/drill"},
		{"branch", "delete", "g", "feature/x", "--force"},
		{"tag", "create", "g", "release/1", "--commit", goodCommit},
		{"tag", "delete", "g", "release/1"},
	} {
		wantText(t, runOffline(t, args...), 9, "unavailable", "dial temporal")
	}
}

func TestHelp_ListsTheNewCommands(t *testing.T) {
	r := runOffline(t, "--help")
	wantCode(t, r, 0)
	for _, want := range []string{"merge", "restore", "tag"} {
		if !strings.Contains(r.stdout, "\n  "+want+" ") {
			t.Errorf("graft --help lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runOffline(t, "branch", "--help")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "\n  delete ") {
		t.Errorf("graft branch --help lacks delete:\n%s", r.stdout)
	}
}

func TestOutcomesDoc_ListsEveryOutcomeWithItsExitCode_AndTheNewCommands(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "outcomes.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, o := range outcome.All {
		row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(string(o)) + "` *\\| *" + strconv.Itoa(o.ExitCode()) + " \\|")
		if !row.MatchString(doc) {
			t.Errorf("docs/outcomes.md has no table row for %s with exit %d", o, o.ExitCode())
		}
	}
	for _, cmd := range []string{"graft merge G", "graft restore G", "graft branch delete G", "graft tag create G",
		"graft tag list G", "graft tag show G", "graft tag delete G"} {
		if !strings.Contains(doc, "| `"+cmd) && !strings.Contains(doc, "`, `"+strings.TrimPrefix(cmd, "graft ")) {
			t.Errorf("docs/outcomes.md's per-command table lacks %q", cmd)
		}
	}
}

func TestUsageErrors_NameTheCommand_SuggestTheOneMeant_GroupHelpWithoutGlobalFlags(t *testing.T) {
	r := runOffline(t, "brnch", "list", "g")
	wantText(t, r, 2, "invalid", `unknown command "brnch" for "graft"; did you mean "branch"?`)
	r = runOffline(t, "branch", "lst", "g")
	wantText(t, r, 2, "invalid", `did you mean "list"?`, "see `graft branch --help`")
	r = runOffline(t, "branch", "create", "g")
	wantText(t, r, 2, "invalid", "see `graft branch create --help`")
	if strings.Contains(r.stderr, "<command>") {
		t.Fatalf("the hint is a template, not a command:\n%s", r)
	}
	r = runOffline(t, "branch", "create", "g", "b", "--from-commit", "not-a-commit")
	wantText(t, r, 2, "invalid", "--from-commit", "not-a-commit")
	if strings.Contains(r.stderr, "format:") {
		t.Fatalf("a package prefix leaks into the message:\n%s", r)
	}

	r = runOffline(t, "branch", "--help")
	wantCode(t, r, 0)
	if strings.Contains(r.stdout, "--temporal-address") || strings.Contains(r.stdout, "--s3-bucket") ||
		!strings.Contains(r.stdout, `Global flags (connection settings, --output): see "graft --help"`) {
		t.Fatalf("graft branch --help lists the global flags:\n%s", r.stdout)
	}
	if r := runOffline(t, "--help"); !strings.Contains(r.stdout, "--temporal-address") {
		t.Fatalf("graft --help does not list the global flags:\n%s", r.stdout)
	}
}

func TestReadCommands_MissingStoreDirectory_NotFoundNamingTheSetting_NothingCreated(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nowhere", ".graft-data")
	for _, args := range [][]string{{"branch", "list", "g"}, {"tag", "list", "g"}, {"log", "g", "main"}} {
		var stdout, stderr bytes.Buffer
		code := Execute(context.Background(), append([]string{"--store-dir", missing}, args...), envOf(nil), &stdout, &stderr)
		r := result{args: args, stdout: stdout.String(), stderr: stderr.String(), code: code}
		wantText(t, r, 6, "not_found", "the store directory "+missing+" does not exist (from --store-dir)")
	}
	if _, err := os.Stat(filepath.Dir(missing)); !os.IsNotExist(err) {
		t.Fatalf("a read created %s (%v)", filepath.Dir(missing), err)
	}
}
