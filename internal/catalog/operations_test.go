package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

func TestOperation_Lifecycle_RunningInDoubtDone(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	op, err := c.OperationInsert(ctxFor(t), catalog.OperationInsertParams{
		ID: "create-branch/g/feature-x", Kind: catalog.OpCreateBranch, Graph: "g",
		Inputs: json.RawMessage(`{"branch": "feature/x", "from": "main"}`), WorkflowID: "wf-1", RunID: "run-1",
	})
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	if op.State != catalog.OperationRunning || op.Outcome != "" || !op.FinishedAt.IsZero() || op.WorkflowID != "wf-1" || op.RunID != "run-1" {
		t.Errorf("new operation %+v, want running, no outcome, unfinished, with workflow ids", op)
	}
	var inputs map[string]string
	if err := json.Unmarshal(op.Inputs, &inputs); err != nil || inputs["branch"] != "feature/x" {
		t.Errorf("inputs %s (%v), want the branch back", op.Inputs, err)
	}

	doubt, err := c.OperationSetState(ctxFor(t), catalog.OperationSetStateParams{ID: op.ID, From: catalog.OperationRunning, To: catalog.OperationInDoubt})
	if err != nil || doubt.State != catalog.OperationInDoubt {
		t.Fatalf("running -> in_doubt = %+v, %v", doubt, err)
	}

	done, err := c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{ID: op.ID, Outcome: catalog.OutcomeCreated})
	if err != nil {
		t.Fatalf("finish: %v", err)
	}
	if done.State != catalog.OperationDone || done.Outcome != catalog.OutcomeCreated || done.FinishedAt.IsZero() || done.Error != "" {
		t.Errorf("finished operation %+v, want done/created with FinishedAt", done)
	}

	got, err := c.OperationGet(ctxFor(t), catalog.OperationGetParams{ID: op.ID})
	if err != nil || got.State != catalog.OperationDone || !got.FinishedAt.Equal(done.FinishedAt) {
		t.Errorf("get after finish = %+v, %v", got, err)
	}

	again, err := c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{ID: op.ID, Outcome: catalog.OutcomeCreated})
	if err != nil || !again.FinishedAt.Equal(done.FinishedAt) {
		t.Errorf("repeated finish with the same outcome = %+v, %v; want the unchanged row", again, err)
	}

	_, err = c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{ID: op.ID, Outcome: catalog.OutcomeConflict})
	if !errors.Is(err, catalog.ErrStateConflict) {
		t.Errorf("finish with another outcome: err = %v, want ErrStateConflict", err)
	}
	_, err = c.OperationSetState(ctxFor(t), catalog.OperationSetStateParams{ID: op.ID, From: catalog.OperationInDoubt, To: catalog.OperationRunning})
	if !errors.Is(err, catalog.ErrStateConflict) {
		t.Errorf("reopen a done operation: err = %v, want ErrStateConflict", err)
	}
}

func TestOperationFinish_FailureOutcome_KeepsTheError(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	op := newOp(t, c, catalog.OpRestore, "g")
	done, err := c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{
		ID: op.ID, Outcome: catalog.OutcomeNotRetained, Error: "table t version 01X was reclaimed",
	})
	if err != nil || done.Outcome != catalog.OutcomeNotRetained || done.Error != "table t version 01X was reclaimed" {
		t.Errorf("finish = %+v, %v; want not_retained with the error text", done, err)
	}
}

func TestOperationInsert_RepeatedWithSameContent_ReturnsTheExistingRow(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	p := catalog.OperationInsertParams{ID: "op-1", Kind: catalog.OpTag, Graph: "g", Inputs: json.RawMessage(`{"a": 1, "b": 2}`)}
	first, err := c.OperationInsert(ctxFor(t), p)
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	p.Inputs = json.RawMessage(`{"b":2,"a":1}`) // the same JSON value, written differently
	again, err := c.OperationInsert(ctxFor(t), p)
	if err != nil || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Errorf("repeated insert = %+v, %v; want the existing row", again, err)
	}
}

func TestOperationInsert_SameIDOtherContent_IsDuplicateNamingWhatDiffers(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	p := catalog.OperationInsertParams{ID: "op-1", Kind: catalog.OpTag, Graph: "g", Inputs: json.RawMessage(`{"a": 1, "b": "x"}`)}
	if _, err := c.OperationInsert(ctxFor(t), p); err != nil {
		t.Fatalf("insert: %v", err)
	}
	for _, tc := range []struct {
		other catalog.OperationInsertParams
		// differences is what the error names as differing from op-1's request.
		differences []string
	}{
		{catalog.OperationInsertParams{ID: "op-1", Kind: catalog.OpTag, Graph: "g", Inputs: json.RawMessage(`{"a": 2, "b": "x"}`)},
			[]string{"a is 2, the first request's 1"}},
		{catalog.OperationInsertParams{ID: "op-1", Kind: catalog.OpTag, Graph: "g", Inputs: json.RawMessage(`{"a": 1, "c": true}`)},
			[]string{`b is none, the first request's "x"`, "c is true, the first request's none"}},
		{catalog.OperationInsertParams{ID: "op-1", Kind: catalog.OpMerge, Graph: "g", Inputs: json.RawMessage(`{"a": 1, "b": "x"}`)},
			[]string{"the kind is merge, the first request's tag"}},
		{catalog.OperationInsertParams{ID: "op-1", Kind: catalog.OpTag, Graph: "h", Inputs: json.RawMessage(`{"a": 1, "b": "x"}`)},
			[]string{`graph is "h", the first request's "g"`}},
	} {
		_, err := c.OperationInsert(ctxFor(t), tc.other)
		var reused *catalog.OperationReusedError
		if !errors.Is(err, catalog.ErrDuplicate) || !errors.As(err, &reused) || !slices.Equal(reused.Differences, tc.differences) {
			t.Errorf("insert %+v over op-1: err = %v, want ErrDuplicate naming %q", tc.other, err, tc.differences)
		}
	}
	if op, err := c.OperationGet(ctxFor(t), catalog.OperationGetParams{ID: "op-1"}); err != nil || string(op.Kind) != "tag" || op.Graph != "g" {
		t.Errorf("op-1 after the refused inserts: %+v, %v; want it unchanged", op, err)
	}
}

func TestOperationInsert_BadArguments_AreInvalid(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	for _, p := range []catalog.OperationInsertParams{
		{ID: "", Kind: catalog.OpTag, Graph: "g"},
		{ID: "x", Kind: "rename_branch", Graph: "g"},
		{ID: "x", Kind: catalog.OpTag, Graph: ""},
		{ID: "x", Kind: catalog.OpTag, Graph: "g", Inputs: json.RawMessage(`{not json`)},
	} {
		if _, err := c.OperationInsert(ctxFor(t), p); !errors.Is(err, catalog.ErrInvalid) {
			t.Errorf("insert %+v: err = %v, want ErrInvalid", p, err)
		}
	}
	op := newOp(t, c, catalog.OpTag, "g")
	if _, err := c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{ID: op.ID, Outcome: "probably_fine"}); !errors.Is(err, catalog.ErrInvalid) {
		t.Errorf("finish with an unknown outcome: err = %v, want ErrInvalid", err)
	}
	if _, err := c.OperationSetState(ctxFor(t), catalog.OperationSetStateParams{ID: op.ID, From: catalog.OperationRunning, To: catalog.OperationDone}); !errors.Is(err, catalog.ErrInvalid) {
		t.Errorf("set state done: err = %v, want ErrInvalid (finish instead)", err)
	}
}

func TestOperationFinish_EveryOutcomeOfTheVocabulary_IsAccepted(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	for _, outcome := range catalog.Outcomes {
		op := newOp(t, c, catalog.OpCreateBranch, "g")
		if _, err := c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{ID: op.ID, Outcome: outcome}); err != nil {
			t.Errorf("finish with %s: %v", outcome, err)
		}
	}
}

func TestOperationGet_Missing_IsNotFound(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	if _, err := c.OperationGet(ctxFor(t), catalog.OperationGetParams{ID: "nope"}); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("get missing: err = %v, want ErrNotFound", err)
	}
	if _, err := c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{ID: "nope", Outcome: catalog.OutcomeDone}); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("finish missing: err = %v, want ErrNotFound", err)
	}
}

func TestOperationList_Filters_SelectNewestFirst(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	a1 := newOp(t, c, catalog.OpCreateBranch, "a")
	a2 := newOp(t, c, catalog.OpCleanup, "a")
	a3 := newOp(t, c, catalog.OpCreateBranch, "a")
	b1 := newOp(t, c, catalog.OpCreateBranch, "b")
	if _, err := c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{ID: a1.ID, Outcome: catalog.OutcomeCreated}); err != nil {
		t.Fatalf("finish: %v", err)
	}
	ids := func(p catalog.OperationListParams) []string {
		t.Helper()
		ops, err := c.OperationList(ctxFor(t), p)
		if err != nil {
			t.Fatalf("list %+v: %v", p, err)
		}
		out := make([]string, len(ops))
		for i, op := range ops {
			out[i] = op.ID
		}
		return out
	}
	for _, tc := range []struct {
		p    catalog.OperationListParams
		want []string
	}{
		{catalog.OperationListParams{}, []string{b1.ID, a3.ID, a2.ID, a1.ID}},
		{catalog.OperationListParams{Graph: "a"}, []string{a3.ID, a2.ID, a1.ID}},
		{catalog.OperationListParams{Graph: "a", Kind: catalog.OpCreateBranch}, []string{a3.ID, a1.ID}},
		{catalog.OperationListParams{Graph: "a", State: catalog.OperationRunning}, []string{a3.ID, a2.ID}},
		{catalog.OperationListParams{State: catalog.OperationDone}, []string{a1.ID}},
		{catalog.OperationListParams{Limit: 2}, []string{b1.ID, a3.ID}},
	} {
		if got := ids(tc.p); !slices.Equal(got, tc.want) {
			t.Errorf("list %+v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if _, err := c.OperationList(ctxFor(t), catalog.OperationListParams{Limit: 5000}); !errors.Is(err, catalog.ErrInvalid) {
		t.Errorf("list with limit 5000: err = %v, want ErrInvalid", err)
	}
}

func TestGraphInsert_SameNameSameLocator_IsIdempotentAndOtherLocatorIsDuplicate(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	g, err := c.GraphInsert(ctxFor(t), catalog.GraphInsertParams{Name: "g", Locator: "s3://bucket/g"})
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	again, err := c.GraphInsert(ctxFor(t), catalog.GraphInsertParams{Name: "g", Locator: "s3://bucket/g"})
	if err != nil || again != g {
		t.Errorf("repeated insert = %+v, %v; want %+v", again, err, g)
	}
	if _, err := c.GraphInsert(ctxFor(t), catalog.GraphInsertParams{Name: "g", Locator: "file:///elsewhere"}); !errors.Is(err, catalog.ErrDuplicate) {
		t.Errorf("insert at another locator: err = %v, want ErrDuplicate", err)
	}
	if got, err := c.GraphGet(ctxFor(t), catalog.GraphGetParams{Name: "g"}); err != nil || got != g {
		t.Errorf("get = %+v, %v; want %+v", got, err, g)
	}
	if _, err := c.GraphGet(ctxFor(t), catalog.GraphGetParams{Name: "nope"}); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("get missing: err = %v, want ErrNotFound", err)
	}
}

func TestOperationListUnfinished_PagesOldestFirstAndSkipsDone(t *testing.T) {
	ctx := context.Background()
	c := catalogtest.Open(t)
	for _, id := range []string{"u1", "u2", "u3", "d1"} {
		if _, err := c.OperationInsert(ctx, catalog.OperationInsertParams{ID: id, Kind: catalog.OpMerge, Graph: "g", Owner: "run-" + id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.OperationFinish(ctx, catalog.OperationFinishParams{ID: "d1", Outcome: catalog.OutcomeMerged, Owner: "run-d1"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for after := (catalog.Operation{}); ; {
		page, err := c.OperationListUnfinished(ctx, catalog.OperationListUnfinishedParams{Graph: "g", Limit: 2, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range page {
			got = append(got, op.ID)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1]
	}
	if strings.Join(got, ",") != "u1,u2,u3" {
		t.Fatalf("unfinished pages %v, want u1,u2,u3", got)
	}
	// A takeover is a compare-and-swap of the owner.
	if _, err := c.OperationTakeOver(ctx, catalog.OperationTakeOverParams{ID: "u1", From: "someone", To: "reconcile/1"}); !errors.Is(err, catalog.ErrNotOwner) {
		t.Fatalf("takeover from the wrong owner: %v, want catalog.ErrNotOwner", err)
	}
	if op, err := c.OperationTakeOver(ctx, catalog.OperationTakeOverParams{ID: "u1", From: "run-u1", To: "reconcile/1"}); err != nil || op.OwnerRun != "reconcile/1" {
		t.Fatalf("takeover: %+v, %v", op, err)
	}
	if _, err := c.OperationFinish(ctx, catalog.OperationFinishParams{ID: "u1", Outcome: catalog.OutcomeMerged, Owner: "run-u1"}); !errors.Is(err, catalog.ErrNotOwner) {
		t.Fatalf("finish by the closed run after the takeover: %v, want catalog.ErrNotOwner", err)
	}
}
