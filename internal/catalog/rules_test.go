package catalog_test

import (
	"errors"
	"testing"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

func TestBranchRule_SetReplacesGetListDelete(t *testing.T) {
	c := catalogtest.Open(t)
	ctx := t.Context()
	if _, err := c.BranchRuleSet(ctx, catalog.BranchRule{Graph: "g", Branch: "main"}); !errors.Is(err, catalog.ErrInvalid) {
		t.Fatalf("a rule asking for nothing: %v, want invalid", err)
	}
	if _, err := c.BranchRuleSet(ctx, catalog.BranchRule{Graph: "g", Branch: "main", Approvals: 2, SetBy: "ana"}); err != nil {
		t.Fatal(err)
	}
	got, err := c.BranchRuleSet(ctx, catalog.BranchRule{Graph: "g", Branch: "main", Approvals: 1, SetBy: "bo",
		Checks: []catalog.BranchCheck{{Name: "quality", TaskQueue: "checks"}}})
	if err != nil || got.Approvals != 1 || got.SetBy != "bo" || len(got.Checks) != 1 || got.Checks[0].TaskQueue != "checks" {
		t.Fatalf("replaced rule %+v, %v", got, err)
	}
	if r, err := c.BranchRuleGet(ctx, "g", "main"); err != nil || r.Approvals != 1 || r.Checks[0].Name != "quality" {
		t.Fatalf("get %+v, %v", r, err)
	}
	if rules, err := c.BranchRuleList(ctx, "g"); err != nil || len(rules) != 1 {
		t.Fatalf("list %+v, %v", rules, err)
	}
	if found, err := c.BranchRuleDelete(ctx, "g", "main"); err != nil || !found {
		t.Fatalf("delete: %v, %v", found, err)
	}
	if _, err := c.BranchRuleGet(ctx, "g", "main"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("get after delete: %v, want not found", err)
	}
	if found, err := c.BranchRuleDelete(ctx, "g", "main"); err != nil || found {
		t.Fatalf("second delete: %v, %v; want nothing found", found, err)
	}
}

func TestMergeReview_OnlyOfAMergeTheLedgerHas(t *testing.T) {
	c := catalogtest.Open(t)
	ctx := t.Context()
	rv := catalog.MergeReview{OpID: "nope", Reviewer: "ana", Approve: true, SourceHead: "h"}
	if _, err := c.MergeReviewInsert(ctx, rv); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("review of an unknown operation: %v, want not found", err)
	}
	if _, err := c.MergeReviewInsert(ctx, catalog.MergeReview{OpID: "x", Reviewer: "ana"}); !errors.Is(err, catalog.ErrInvalid) {
		t.Fatalf("review without a source head: %v, want invalid", err)
	}
}
