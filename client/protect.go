package client

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/workflows"
	"github.com/graftworks/graft/workflows/contract"
)

// A protected branch takes merges only once every check of its rule passed on the
// merge's plan and enough reviewers approved the source head (docs/merge-restore-tags.md,
// "Protected branches").

// BranchCheck is a check of a branch rule: the workflow type Name, started on TaskQueue.
type BranchCheck = contract.MergeCheck

// BranchRule is what merges into Branch wait for.
type BranchRule struct {
	Graph     string        `json:"graph"`
	Branch    string        `json:"branch"`
	Checks    []BranchCheck `json:"checks"`
	Approvals int           `json:"approvals"`
	// SetBy is who set the rule, as they named themselves; UpdatedAt when.
	SetBy     string    `json:"set_by,omitempty"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// nameRE is what a check's workflow type and task queue may be.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$`)

// Validate checks a rule before anything is contacted.
func (r BranchRule) Validate() error {
	if err := firstInvalid(checkGraph(r.Graph), checkBranch(r.Branch)); err != nil {
		return err
	}
	switch {
	case r.Approvals < 0:
		return outcome.Errorf(outcome.Invalid, "", "approvals must not be negative")
	case len(r.Checks) == 0 && r.Approvals == 0:
		return outcome.Errorf(outcome.Invalid, "", "a rule needs a check or an approval; remove the rule to unprotect the branch")
	}
	seen := map[string]bool{}
	for _, c := range r.Checks {
		switch {
		case !nameRE.MatchString(c.Name):
			return outcome.Errorf(outcome.Invalid, "", "check %q: a check is a workflow type name (letters, digits, . _ : / -)", c.Name)
		case !nameRE.MatchString(c.TaskQueue):
			return outcome.Errorf(outcome.Invalid, "", "check %q: task queue %q is not a task queue name", c.Name, c.TaskQueue)
		case seen[c.Name]:
			return outcome.Errorf(outcome.Invalid, "", "check %q is listed twice", c.Name)
		}
		seen[c.Name] = true
	}
	return nil
}

// Protect sets the rule of a branch, replacing any it had; the branch need not exist yet.
func (o *Ops) Protect(ctx context.Context, r BranchRule) (BranchRule, error) {
	if err := r.Validate(); err != nil {
		return BranchRule{}, err
	}
	checks := make([]catalog.BranchCheck, len(r.Checks))
	for i, c := range r.Checks {
		checks[i] = catalog.BranchCheck{Name: c.Name, TaskQueue: c.TaskQueue}
	}
	got, err := o.cat.BranchRuleSet(ctx, catalog.BranchRule{Graph: r.Graph, Branch: r.Branch, Checks: checks, Approvals: r.Approvals, SetBy: r.SetBy})
	if err != nil {
		return BranchRule{}, fmt.Errorf("protect %s: %w", r.Branch, ledgerErr(err))
	}
	return ruleOf(got), nil
}

// Protection returns the rule of a branch; a branch without one is not_found.
func (o *Ops) Protection(ctx context.Context, graph, branch string) (BranchRule, error) {
	if err := firstInvalid(checkGraph(graph), checkBranch(branch)); err != nil {
		return BranchRule{}, err
	}
	got, err := o.cat.BranchRuleGet(ctx, graph, branch)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return BranchRule{}, outcome.Errorf(outcome.NotFound, "", "branch %q of graph %q is not protected", branch, graph)
	case err != nil:
		return BranchRule{}, fmt.Errorf("read the rule of %s: %w", branch, ledgerErr(err))
	}
	return ruleOf(got), nil
}

// Protections returns the rules of a graph's branches, by branch.
func (o *Ops) Protections(ctx context.Context, graph string) ([]BranchRule, error) {
	if err := checkGraph(graph); err != nil {
		return nil, err
	}
	got, err := o.cat.BranchRuleList(ctx, graph)
	if err != nil {
		return nil, fmt.Errorf("list branch rules: %w", ledgerErr(err))
	}
	out := make([]BranchRule, len(got))
	for i, r := range got {
		out[i] = ruleOf(r)
	}
	return out, nil
}

// Unprotect removes the rule of a branch; a branch without one is not_found. A merge
// already waiting keeps the rule its plan read until it plans again.
func (o *Ops) Unprotect(ctx context.Context, graph, branch string) error {
	if err := firstInvalid(checkGraph(graph), checkBranch(branch)); err != nil {
		return err
	}
	found, err := o.cat.BranchRuleDelete(ctx, graph, branch)
	switch {
	case err != nil:
		return fmt.Errorf("unprotect %s: %w", branch, ledgerErr(err))
	case !found:
		return outcome.Errorf(outcome.NotFound, "", "branch %q of graph %q is not protected", branch, graph)
	}
	return nil
}

func ruleOf(r catalog.BranchRule) BranchRule {
	out := BranchRule{Graph: r.Graph, Branch: r.Branch, Approvals: r.Approvals, SetBy: r.SetBy, UpdatedAt: r.UpdatedAt,
		Checks: make([]BranchCheck, len(r.Checks))}
	for i, c := range r.Checks {
		out.Checks[i] = BranchCheck{Name: c.Name, TaskQueue: c.TaskQueue}
	}
	return out
}

// Review is an approval or a rejection of a waiting merge.
type Review = contract.Review

// MergeWait is what a waiting merge waits for.
type MergeWait = contract.MergeWait

// ReviewRequest reviews the waiting merge OpID.
type ReviewRequest struct {
	OpID     string
	Reviewer string
	// Approve approves; otherwise the review rejects the merge, which ends rejected.
	Approve bool
	// Comment is an approval's comment or a rejection's reason (required to reject).
	Comment string
	// SourceHead, when set, is the source head the reviewer saw: the review is refused
	// (conflict) when the merge would now merge another.
	SourceHead string
}

// Validate checks a review before anything is contacted.
func (r ReviewRequest) Validate() error {
	switch {
	case r.OpID == "":
		return outcome.Errorf(outcome.Invalid, "", "name the merge's operation id")
	case r.Reviewer == "":
		return outcome.Errorf(outcome.Invalid, "", "name the reviewer")
	case !r.Approve && r.Comment == "":
		return outcome.Errorf(outcome.Invalid, "", "a rejection gives its reason")
	}
	return checkCommit("source head", r.SourceHead)
}

// Review records a review of a waiting merge in the ledger, through the merge's
// workflow, and returns what the merge waits for after it. A merge that is not waiting
// is a conflict (it may be planning again: retry); an unknown one not_found.
func (o *Ops) Review(ctx context.Context, r ReviewRequest) (MergeWait, error) {
	if err := r.Validate(); err != nil {
		return MergeWait{}, err
	}
	if o.c == nil {
		return MergeWait{}, errors.New("review: Ops has no client (Ops.WithClient)")
	}
	op, err := o.Show(ctx, r.OpID)
	switch {
	case err != nil:
		return MergeWait{}, err
	case op.Kind != string(catalog.OpMerge):
		return MergeWait{}, outcome.Errorf(outcome.Invalid, "", "operation %s is a %s, not a merge", r.OpID, op.Kind)
	case op.State == OperationDone:
		return MergeWait{}, outcome.Errorf(outcome.Conflict, "", "merge %s ended %s; it takes no reviews", r.OpID, op.Outcome)
	}
	h, err := o.c.tc.UpdateWorkflow(ctx, sdkclient.UpdateWorkflowOptions{WorkflowID: op.WorkflowID, RunID: op.RunID,
		UpdateName: workflows.ReviewUpdateName, WaitForStage: sdkclient.WorkflowUpdateStageCompleted,
		Args: []any{Review{Reviewer: r.Reviewer, Approve: r.Approve, Comment: r.Comment, SourceHead: r.SourceHead}}})
	var w MergeWait
	if err == nil {
		err = h.Get(ctx, &w)
	}
	var app *temporal.ApplicationError
	switch {
	case errors.As(err, &app) && outcome.Outcome(app.Type()).Valid():
		return MergeWait{}, outcome.Errorf(outcome.Outcome(app.Type()), r.OpID, "%s", app.Message())
	case err != nil:
		return MergeWait{}, fmt.Errorf("review merge %s: %w", r.OpID, err)
	}
	return w, nil
}

// Reviews returns the reviews the ledger recorded of a merge, in order.
func (o *Ops) Reviews(ctx context.Context, opID string) ([]Review, error) {
	got, err := o.cat.MergeReviewList(ctx, opID)
	if err != nil {
		return nil, fmt.Errorf("list the reviews of %s: %w", opID, ledgerErr(err))
	}
	out := make([]Review, len(got))
	for i, r := range got {
		out[i] = Review{Reviewer: r.Reviewer, Approve: r.Approve, Comment: r.Comment, SourceHead: r.SourceHead,
			At: r.CreatedAt.UTC().Format(time.RFC3339Nano)}
	}
	return out, nil
}
