package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/workflows/contract"
)

// mergeGate returns the rule of a protected target (nil when it has none) and where the
// ledger has the graph.
func (a *Activities) mergeGate(ctx context.Context, graphName, target string) (*contract.MergeRule, string, error) {
	r, err := a.Catalog.BranchRuleGet(ctx, graphName, target)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return nil, "", nil
	case err != nil:
		return nil, "", err
	case !r.Protected():
		return nil, "", nil
	}
	rule := &contract.MergeRule{Approvals: r.Approvals, Checks: append([]contract.MergeCheck{}, mapped(r.Checks, func(c catalog.BranchCheck) contract.MergeCheck {
		return contract.MergeCheck{Name: c.Name, TaskQueue: c.TaskQueue}
	})...)}
	locator := ""
	if g, err := a.Catalog.GraphGet(ctx, catalog.GraphGetParams{Name: graphName}); err == nil {
		locator = g.Locator
	} else if !errors.Is(err, catalog.ErrNotFound) {
		return nil, "", err
	}
	return rule, locator, nil
}

// MergeHeadsInput names the branches of a waiting merge.
type MergeHeadsInput struct{ Graph, Source, Target string }

// MergeHeadsResult is the heads of a waiting merge's branches, or the outcome that ends it
// (a branch deleted, say).
type MergeHeadsResult struct {
	SourceHead, TargetHead string
	Outcome                outcome.Outcome `json:",omitempty"`
	Message                string          `json:",omitempty"`
}

// MergeHeads reads the heads of a waiting merge's source and target: a head that moved
// means the plan its checks saw is no longer what it would merge.
func (a *Activities) MergeHeads(ctx context.Context, in MergeHeadsInput) (MergeHeadsResult, error) {
	heads := make([]string, 2)
	for i, name := range []string{in.Source, in.Target} {
		h, out, msg, err := a.readBranchHead(ctx, in.Graph, name)
		if err != nil || out != "" {
			return MergeHeadsResult{Outcome: out, Message: msg}, err
		}
		heads[i] = h.Commit.ID.String()
	}
	return MergeHeadsResult{SourceHead: heads[0], TargetHead: heads[1]}, nil
}

// RecordReviewInput is a review of a waiting merge to record.
type RecordReviewInput struct {
	OpID   string
	Review contract.Review
}

// RecordReview records a review in the ledger, with who and when, and returns it as
// recorded.
func (a *Activities) RecordReview(ctx context.Context, in RecordReviewInput) (contract.Review, error) {
	r, err := a.Catalog.MergeReviewInsert(ctx, catalog.MergeReview{OpID: in.OpID, Reviewer: in.Review.Reviewer,
		Approve: in.Review.Approve, Comment: in.Review.Comment, SourceHead: in.Review.SourceHead})
	if err != nil {
		return contract.Review{}, fmt.Errorf("record review: %w", err)
	}
	in.Review.At = r.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	return in.Review, nil
}
