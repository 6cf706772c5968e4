package main

import (
	"strings"
	"testing"
	"time"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
)

// TestBranchProtect_ProtectionUnprotect_RoundTripInTextAndJSON_BadRulesExit2 sets a
// rule with a check on its own queue, one on --check-queue and an approval; reads it
// back by branch and by graph, in JSON and text; removes it, after which reading or
// removing it again is not_found (6). A rule without checks or approvals, a negative
// count, a bad check name, a check listed twice and a bad branch are invalid (2).
func TestBranchProtect_ProtectionUnprotect_RoundTripInTextAndJSON_BadRulesExit2(t *testing.T) {
	p := newInProcess(t)
	const g = "pr"
	r := p.run(t, "branch", "protect", g, "main", "--check", "quality@sales-checks", "--check", "schema",
		"--check-queue", "other-checks", "--approvals", "2", "--as", "ana", "-o", "json")
	wantCode(t, r, 0)
	want := []client.BranchCheck{{Name: "quality", TaskQueue: "sales-checks"}, {Name: "schema", TaskQueue: "other-checks"}}
	set := jsonOut[client.BranchRule](t, r)
	if set.Graph != g || set.Branch != "main" || set.Approvals != 2 || set.SetBy != "ana" || set.UpdatedAt.IsZero() ||
		len(set.Checks) != 2 || set.Checks[0] != want[0] || set.Checks[1] != want[1] {
		t.Fatalf("protect result %+v", set)
	}
	// Without --as the rule is set by $USER, else "graft"; the default queue is graft-checks.
	r = p.run(t, "branch", "protect", g, "release", "--check", "smoke", "-o", "json")
	wantCode(t, r, 0)
	if got := jsonOut[client.BranchRule](t, r); got.SetBy != "graft" || got.Checks[0].TaskQueue != defaultCheckQueue || got.Approvals != 0 {
		t.Fatalf("protect with defaults %+v", got)
	}

	r = p.run(t, "branch", "protection", g, "main", "-o", "json")
	wantCode(t, r, 0)
	if got := jsonOut[client.BranchRule](t, r); got.SetBy != "ana" || got.Approvals != 2 || len(got.Checks) != 2 || got.Checks[1] != want[1] {
		t.Fatalf("protection %+v", got)
	}
	wantStdout(t, p.run(t, "branch", "protection", g, "main"), "branch main in pr is protected",
		"quality@sales-checks, schema@other-checks", "approvals  2", "set by     ana")
	r = p.run(t, "branch", "protection", g, "-o", "json")
	wantCode(t, r, 0)
	if all := jsonOut[branchRules](t, r); all.Graph != g || len(all.Rules) != 2 || all.Rules[0].Branch != "main" || all.Rules[1].Branch != "release" {
		t.Fatalf("protection of the graph %+v", all)
	}
	wantStdout(t, p.run(t, "branch", "protection", g), "BRANCH", "main", "quality@sales-checks", "release", "smoke@graft-checks")

	wantStdout(t, p.run(t, "branch", "unprotect", g, "main"), "branch main in pr is no longer protected")
	wantText(t, p.run(t, "branch", "protection", g, "main"), 6, "not_found", "is not protected", "graft branch protection "+g)
	if rep := jsonErr(t, p.run(t, "branch", "unprotect", g, "main", "-o", "json")); rep.Outcome != "not_found" {
		t.Fatalf("unprotect twice: %+v", rep)
	}
	r = p.run(t, "branch", "protection", g, "-o", "json")
	wantCode(t, r, 0)
	if all := jsonOut[branchRules](t, r); len(all.Rules) != 1 || all.Rules[0].Branch != "release" {
		t.Fatalf("protection after unprotect %+v", all)
	}
	wantCode(t, p.run(t, "branch", "unprotect", g, "release"), 0)
	wantStdout(t, p.run(t, "branch", "protection", g), "no branch of pr is protected")

	for what, args := range map[string][]string{
		"no check, no approval": {"main"},
		"negative approvals":    {"main", "--approvals", "-1"},
		"a bad check name":      {"main", "--check", "no spaces@q"},
		"an empty queue":        {"main", "--check", "quality@"},
		"a check twice":         {"main", "--check", "quality", "--check", "quality@q2"},
		"a bad branch":          {"bad..name", "--approvals", "1"},
	} {
		r := p.run(t, append([]string{"branch", "protect", g}, append(args, "-o", "json")...)...)
		if rep := jsonErr(t, r); rep.Outcome != "invalid" || rep.ExitCode != outcome.ExitInvalid {
			t.Errorf("%s: %+v", what, rep)
		}
	}
	wantCode(t, p.run(t, "branch", "protection"), outcome.ExitInvalid)
	wantCode(t, p.run(t, "branch", "protection", g, "main", "extra"), outcome.ExitInvalid)
}

// protectedMerge makes graph g with a table on feature/x that a merge into main would
// adopt, and protects main with one approval; it returns main's head.
func protectedMerge(t *testing.T, p *inProcess, g string) string {
	t.Helper()
	file := tempFiles(t)
	wantCode(t, p.run(t, "graph", "init", g), 0)
	wantCode(t, p.run(t, "table", "write", g, "main", "events", file("m.csv", "id\n1\n")), 0)
	wantCode(t, p.run(t, "branch", "create", g, "feature/x"), 0)
	wantCode(t, p.run(t, "table", "write", g, "feature/x", "orders", file("x.csv", "id\n2\n")), 0)
	wantCode(t, p.run(t, "branch", "protect", g, "main", "--approvals", "1", "--as", "ops"), 0)
	return mainHead(t, p, g)
}

func mainHead(t *testing.T, p *inProcess, g string) string {
	t.Helper()
	r := p.run(t, "branch", "show", g, "main", "-o", "json")
	wantCode(t, r, 0)
	return jsonOut[client.BranchDetail](t, r).Head
}

// waitingMerge waits until op list --waiting lists one merge, and returns it.
func waitingMerge(t *testing.T, p *inProcess) opView {
	t.Helper()
	for start := time.Now(); time.Since(start) < time.Minute; time.Sleep(200 * time.Millisecond) {
		r := p.run(t, "op", "list", "--waiting", "-o", "json")
		wantCode(t, r, 0)
		if ops := jsonOut[opList](t, r).Operations; len(ops) > 0 {
			if len(ops) != 1 || ops[0].Kind != "merge" || ops[0].Waiting != "approvals 0/1" {
				t.Fatalf("op list --waiting: %+v", ops)
			}
			return ops[0]
		}
	}
	t.Fatal("no merge waits after a minute")
	return opView{}
}

// TestMerge_IntoBranchNeedingAnApproval_WaitsUntilApprovedByCLI_ThenMerges merges into
// a main that needs one approval: the merge command waits, showing what it waits for on
// stderr; op list --waiting lists it with that text; merge approve records the review
// and says nothing more is needed; the merge command then exits 0 with merged or
// adopted, and op show lists the approval.
func TestMerge_IntoBranchNeedingAnApproval_WaitsUntilApprovedByCLI_ThenMerges(t *testing.T) {
	p := newInProcess(t)
	const g = "pa"
	before := protectedMerge(t, p, g)
	done := make(chan result, 1)
	go func() { done <- p.run(t, "merge", g, "feature/x") }()
	op := waitingMerge(t, p)
	wantStdout(t, p.run(t, "op", "list", "--waiting"), op.ID, "feature/x into main", "approvals 0/1")
	wantStdout(t, p.run(t, "op", "show", op.ID), "waiting", "approvals 0/1")

	wantText(t, p.run(t, "merge", "approve", op.ID), outcome.ExitInvalid, "invalid", "--as NAME is required")
	r := p.run(t, "merge", "approve", op.ID, "--as", "ana", "--comment", "numbers match", "-o", "json")
	wantCode(t, r, 0)
	if rv := jsonOut[reviewed](t, r); rv.OpID != op.ID || !rv.Approve || rv.Reviewer != "ana" || rv.Wait.Approvals != 1 || rv.SourceHead == "" {
		t.Fatalf("approve result %+v", rv)
	}
	var merge result
	select {
	case merge = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the merge did not end a minute after its approval")
	}
	wantStdout(t, merge, "into main in "+g)
	if !strings.Contains(merge.stderr, "waiting: approvals 0/1") {
		t.Fatalf("the merge's progress does not show what it waits for:\n%s", merge)
	}
	if head := mainHead(t, p, g); head == before {
		t.Fatalf("main's head did not move: %s", head)
	}
	r = p.run(t, "op", "show", op.ID, "-o", "json")
	wantCode(t, r, 0)
	if v := jsonOut[opView](t, r); v.Outcome.ExitCode() != outcome.ExitOK || len(v.Reviews) != 1 || v.Reviews[0].Reviewer != "ana" ||
		!v.Reviews[0].Approve || v.Reviews[0].Comment != "numbers match" {
		t.Fatalf("op show after the approval %+v", v)
	}
	wantStdout(t, p.run(t, "op", "show", op.ID), "reviews", "approved by ana at ", ": numbers match")
	wantStdout(t, p.run(t, "op", "list", "--waiting"), "no merge is waiting")
	// The merge ended: a review now is a conflict.
	wantText(t, p.run(t, "merge", "approve", op.ID, "--as", "bo"), 5, "conflict", "takes no reviews")
}

// TestMerge_DetachedIntoProtectedBranch_RejectedByCLI_EndsRejectedExit11WritingNothing
// starts a merge into a protected main with --detach, which returns its operation id at
// once; merge reject by the CLI ends it: op wait exits 11 with the reviewer's reason, main's
// head is unchanged, and op show lists the rejection.
func TestMerge_DetachedIntoProtectedBranch_RejectedByCLI_EndsRejectedExit11WritingNothing(t *testing.T) {
	p := newInProcess(t)
	const g = "pj"
	before := protectedMerge(t, p, g)
	r := p.run(t, "merge", g, "feature/x", "--detach", "-o", "json")
	wantCode(t, r, 0)
	started := jsonOut[startedMerge](t, r)
	if op := waitingMerge(t, p); started.OpID == "" || op.ID != started.OpID {
		t.Fatalf("detached merge %+v; waiting %+v", started, op)
	}
	wantText(t, p.run(t, "merge", "reject", started.OpID, "--as", "ana"), outcome.ExitInvalid, "invalid", "--reason")
	wantStdout(t, p.run(t, "merge", "reject", started.OpID, "--as", "ana", "--reason", "prices drop the EUR rows"),
		"rejected merge "+started.OpID+" as ana", "ends rejected")
	rep := jsonErr(t, p.run(t, "op", "wait", started.OpID, "-o", "json"))
	if rep.Outcome != string(outcome.Rejected) || rep.ExitCode != outcome.ExitRejected || !strings.Contains(rep.Message, "rejected by ana: prices drop the EUR rows") {
		t.Fatalf("op wait of the rejected merge: %+v", rep)
	}
	if head := mainHead(t, p, g); head != before {
		t.Fatalf("a rejected merge moved main from %s to %s", before, head)
	}
	wantStdout(t, p.run(t, "op", "show", started.OpID), "rejected by ana at ", ": because prices drop the EUR rows")
}

// TestMerge_IntoProtectedBranch_WaitTimeoutPasses_EndsRejectedNamingTheDeadline merges
// with --wait-timeout 3s and no review: the merge command exits 11, its message names
// the passed deadline and what it still waited for, and main's head is unchanged.
func TestMerge_IntoProtectedBranch_WaitTimeoutPasses_EndsRejectedNamingTheDeadline(t *testing.T) {
	p := newInProcess(t)
	const g = "pt"
	before := protectedMerge(t, p, g)
	r := p.run(t, "merge", g, "feature/x", "--wait-timeout", "3s", "-o", "json")
	rep := jsonErr(t, r)
	if rep.Outcome != string(outcome.Rejected) || rep.ExitCode != outcome.ExitRejected || rep.OpID == "" ||
		!strings.Contains(rep.Message, "wait deadline") || !strings.Contains(rep.Message, "approvals 0/1") ||
		!strings.Contains(rep.Next, "graft op show "+rep.OpID) {
		t.Fatalf("merge past its wait deadline: %+v", rep)
	}
	if head := mainHead(t, p, g); head != before {
		t.Fatalf("a rejected merge moved main from %s to %s", before, head)
	}
	wantCode(t, p.run(t, "merge", g, "feature/x", "--wait-timeout", "-1s"), outcome.ExitInvalid)
	wantCode(t, p.run(t, "merge", g, "feature/x", "--detach", "--preview"), outcome.ExitInvalid)
}
