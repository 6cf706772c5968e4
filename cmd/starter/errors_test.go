package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/devstack"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
)

// closedAddr is 127.0.0.1:PORT where nothing listens (it was free a moment ago).
func closedAddr(t *testing.T) string {
	t.Helper()
	p, err := devstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p)
}

// TestGraftBinary_ErrorPaths runs the built binary into each failure that
// needs no live graft stack and checks its message, next step and exit code.
func TestGraftBinary_ErrorPaths(t *testing.T) {
	bin := buildGraft(t)
	run := func(env []string, args ...string) result { return runGraft(t, bin, env, args...) }
	file := filepath.Join(t.TempDir(), "part-0.csv")
	if err := os.WriteFile(file, []byte("id\n1\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("bad flags are invalid (2)", func(t *testing.T) {
		wantText(t, run(nil, "--no-such-flag"), 2, "invalid", "unknown flag: --no-such-flag")
		wantText(t, run(nil, "no-such-command"), 2, "invalid", `unknown command "no-such-command"`)
		wantText(t, run(nil, "branch", "frobnicate"), 2, "invalid", `unknown command "frobnicate" for "graft branch"`)
		wantText(t, run(nil, "branch", "create", "g"), 2, "invalid", "takes 2 argument(s) (GRAPH BRANCH), got 1")
		wantText(t, run(nil, "table", "write", "g", "main", "t"), 2, "invalid", "at least 4 argument(s)")
		wantText(t, run(nil, "--output", "yaml", "branch", "list", "g"), 2, "invalid", `--output: want text or json, got "yaml"`)
		wantText(t, run([]string{"GRAFT_DIAL_TIMEOUT=soon"}, "branch", "list", "g"), 2, "invalid", `GRAFT_DIAL_TIMEOUT="soon"`)
		wantText(t, run([]string{"GRAFT_TEMPORAL_ADDRESS=nocolon"}, "branch", "create", "g", "b"), 2, "invalid",
			`GRAFT_TEMPORAL_ADDRESS: want host:port, got "nocolon"`)
		wantText(t, run(nil, "--store-dir", "x", "--s3-bucket", "b", "branch", "list", "g"), 2, "invalid",
			"--store-dir and --s3-bucket are mutually exclusive")
		wantText(t, run(nil, "--db-schema", "Not-An-Identifier", "op", "list"), 2, "invalid", "--db-schema")
		wantText(t, run(nil, "cleanup", "run", "g", "--dry-run", "--mark", "--keep-newest", "1"), 2, "invalid",
			"at most one of --dry-run, --mark, --sweep")
		wantText(t, run(nil, "cleanup", "run", "g", "--dry-run"), 2, "invalid", "give a retention window")
		wantText(t, run(nil, "branch", "create", "g", "b", "--from-branch", "x", "--from-tag", "y"), 2, "invalid", "at most one of --from-branch")
		wantText(t, run(nil, "branch", "repair", "g", "b"), 2, "invalid", "--keep NATIVE is required")
		// The flag wins over its variable: a good flag hides a bad variable's value.
		r := run([]string{"GRAFT_OUTPUT=yaml"}, "-o", "json", "branch", "create", "g")
		if rep := jsonErr(t, r); rep.Outcome != "invalid" || rep.ExitCode != 2 || !strings.Contains(rep.Message, "takes 2 argument(s)") {
			t.Fatalf("report %+v", rep)
		}
	})

	t.Run("invalid names are invalid (2) before anything is contacted", func(t *testing.T) {
		// Nothing listens at the Temporal address: a name check that contacted
		// it first would exit 9.
		env := []string{"GRAFT_TEMPORAL_ADDRESS=" + closedAddr(t)}
		wantText(t, run(env, "graph", "init", "Bad_Graph!"), 2, "invalid", `invalid graph name "Bad_Graph!"`)
		wantText(t, run(env, "branch", "create", "g", "a//b"), 2, "invalid", "branch name")
		wantText(t, run(env, "table", "write", "g", "main", "Bad Table", file), 2, "invalid", "table name")
		wantText(t, run(env, "branch", "repair", "g", "b", "--keep", "not-native"), 2, "invalid", "--keep")
	})

	t.Run("unreachable Temporal is unavailable (9)", func(t *testing.T) {
		addr := closedAddr(t)
		env := []string{"GRAFT_TEMPORAL_ADDRESS=" + addr, "GRAFT_DIAL_TIMEOUT=3s"}
		wantText(t, run(env, "branch", "create", "g", "b"), 9, "unavailable", "dial temporal at "+addr, "graft dev")
		wantText(t, run(env, "graph", "init", "g"), 9, "unavailable", "dial temporal at "+addr)
		rep := jsonErr(t, run(env, "-o", "json", "cleanup", "schedule", "describe", "g"))
		if rep.Outcome != "unavailable" || rep.ExitCode != outcome.ExitUnavailable || !strings.Contains(rep.Next, addr) {
			t.Fatalf("report %+v", rep)
		}
	})

	t.Run("unreachable Postgres is unavailable (9), without the password", func(t *testing.T) {
		env := []string{"DATABASE_URL=" + catalogtest.UnreachableURL(t)}
		for _, args := range [][]string{{"op", "list"}, {"op", "show", "X"}, {"dev", "--store-dir", t.TempDir()}} {
			r := run(env, args...)
			wantText(t, r, 9, "unavailable", "postgres unavailable", "Postgres")
			if strings.Contains(r.stderr, catalogtest.UnreachablePassword) {
				t.Fatalf("the error shows the database password:\n%s", r)
			}
		}
	})

	t.Run("unreachable S3 is unavailable (9)", func(t *testing.T) {
		env := []string{
			"GRAFT_S3_ENDPOINT=http://" + closedAddr(t), "GRAFT_S3_BUCKET=graft", "GRAFT_S3_PATH_STYLE=true",
			"AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s", "GRAFT_DIAL_TIMEOUT=5s",
		}
		wantText(t, run(env, "branch", "list", "g"), 9, "unavailable", "check store s3://graft", "--s3-endpoint")
		rep := jsonErr(t, run(env, "-o", "json", "branch", "show", "g", "main"))
		if rep.Outcome != "unavailable" || rep.ExitCode != 9 {
			t.Fatalf("report %+v", rep)
		}
	})

	t.Run("an unknown graph on a reachable S3 store is not_found (6)", func(t *testing.T) {
		s3 := testenv.VersityGW(t)
		env := []string{
			"GRAFT_S3_ENDPOINT=" + s3.Endpoint, "GRAFT_S3_BUCKET=" + s3.NewBucket(t), "GRAFT_S3_PATH_STYLE=true",
			"GRAFT_S3_REGION=" + s3.Region, "AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey,
		}
		wantText(t, run(env, "branch", "list", "no-such-graph"), 6, "not_found", `graph "no-such-graph" does not exist`)
	})
}

func TestClassify_EveryOutcomeError_ExitsWithItsDocumentedCode(t *testing.T) {
	for _, o := range outcome.All {
		if o.Success() {
			continue // successes are not errors
		}
		err := fmt.Errorf("create branch: %w", &outcome.Error{Outcome: o, OpID: "OP1", Message: "m"})
		r := classify(err)
		if r.Outcome != string(o) || r.ExitCode != o.ExitCode() || r.OpID != "OP1" || r.Message != "m" || r.Next == "" {
			t.Errorf("%s: report %+v", o, r)
		}
	}
	for name, c := range map[string]struct {
		err     error
		outcome string
		code    int
	}{
		"usage":             {usageError{errors.New("bad")}, "invalid", 2},
		"postgres down":     {fmt.Errorf("open: %w", catalog.ErrUnavailable), "unavailable", 9},
		"store down":        {fmt.Errorf("list: %w", storage.ErrUnavailable), "unavailable", 9},
		"store refused":     {fmt.Errorf("put: %w", storage.ErrRefused), "refused", 8},
		"temporal down":     {unavailable(errors.New("dial"), "n"), "unavailable", 9},
		"not migrated":      {fmt.Errorf("open: %w", catalog.ErrNotMigrated), "failure", 1},
		"interrupted":       {fmt.Errorf("wait: %w", context.Canceled), "failure", 1},
		"anything else":     {errors.New("boom"), "failure", 1},
		"in_doubt, wrapped": {withNext(&outcome.Error{Outcome: outcome.InDoubt, OpID: "X"}, "settle X"), "in_doubt", 4},
	} {
		r := classify(c.err)
		if r.Outcome != c.outcome || r.ExitCode != c.code {
			t.Errorf("%s: report %+v, want %s (%d)", name, r, c.outcome, c.code)
		}
	}
	if r := classify(withNext(&outcome.Error{Outcome: outcome.InDoubt, OpID: "X"}, "settle %s", "X")); r.Next != "settle X" {
		t.Errorf("a command's next step does not replace the default: %q", r.Next)
	}
}

// A start Temporal left unanswered exits 9 (unavailable) naming the operation, with
// the one safe repeat: the same command under its operation id (a cleanup attaches by
// graph); an interrupted one stays an interruption.
func TestClassify_StartUnanswered_UnavailableWithTheOpAndTheRepeatThatAttaches(t *testing.T) {
	create := &client.UnansweredError{Request: "start create branch b in g", WorkflowID: client.CreateBranchWorkflowID("g", "b"), OpID: "01OP",
		Err: errors.New("context deadline exceeded")}
	r := classify(fmt.Errorf("start create of g/b: %w", create))
	if r.Outcome != "unavailable" || r.ExitCode != 9 || r.OpID != "01OP" ||
		!strings.Contains(r.Next, "`graft op show 01OP`") || !strings.Contains(r.Next, "--idempotency-key 01OP") {
		t.Errorf("create: report %+v", r)
	}
	cleanup := &client.UnansweredError{Request: "start cleanup of g", WorkflowID: client.CleanupWorkflowID("g"), OpID: "01RUN", Err: errors.New("unavailable")}
	if r := classify(cleanup); r.ExitCode != 9 || r.OpID != "01RUN" || strings.Contains(r.Next, "--idempotency-key") ||
		!strings.Contains(r.Next, "attaches to the graph's cleanup") {
		t.Errorf("cleanup: report %+v", r)
	}
	if r := classify(fmt.Errorf("%w (%w)", create, context.Canceled)); r.ExitCode != 1 || !strings.HasPrefix(r.Message, "interrupted") {
		t.Errorf("interrupted: report %+v", r)
	}
}

func TestInDoubtNext_NamesTheWaitAndTheAbandonCommands(t *testing.T) {
	got := inDoubtNext("01OP", "g", "feature/x")
	for _, want := range []string{"`graft op wait 01OP`", "`graft branch abandon g feature/x`"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
}
