package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// BranchCheck is a check a merge into a protected branch runs: the workflow type Name,
// started as a child workflow on TaskQueue (a queue the user's own worker polls).
type BranchCheck struct {
	Name      string `json:"name"`
	TaskQueue string `json:"task_queue"`
}

// BranchRule is what a merge into Branch waits for: every check passing on the merge's
// plan, and Approvals approvals of its source head.
type BranchRule struct {
	Graph, Branch string
	Checks        []BranchCheck
	Approvals     int
	SetBy         string
	UpdatedAt     time.Time
}

// Protected reports whether the rule asks a merge to wait for anything.
func (r BranchRule) Protected() bool { return len(r.Checks) > 0 || r.Approvals > 0 }

// BranchRuleSet records r, replacing the branch's rule. A rule that asks for nothing is
// ErrInvalid: remove the rule instead.
func (c *Catalog) BranchRuleSet(ctx context.Context, r BranchRule) (BranchRule, error) {
	what := fmt.Sprintf("set the rule of branch %q of graph %q", r.Branch, r.Graph)
	switch {
	case r.Graph == "" || r.Branch == "":
		return BranchRule{}, c.wrap(what, invalid("graph and branch are required"))
	case !r.Protected():
		return BranchRule{}, c.wrap(what, invalid("a rule needs a check or an approval"))
	case r.Approvals < 0:
		return BranchRule{}, c.wrap(what, invalid("approvals must not be negative"))
	}
	if r.Checks == nil {
		r.Checks = []BranchCheck{}
	}
	checks, err := json.Marshal(r.Checks)
	if err != nil {
		return BranchRule{}, c.wrap(what, err)
	}
	return queryOne(ctx, c, c.pool, what, scanBranchRule, `
		INSERT INTO branch_rules (graph, branch, checks, approvals, set_by) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (graph, branch) DO UPDATE SET checks = EXCLUDED.checks, approvals = EXCLUDED.approvals,
			set_by = EXCLUDED.set_by, updated_at = now()
		RETURNING `+branchRuleColumns, r.Graph, r.Branch, string(checks), r.Approvals, r.SetBy)
}

// BranchRuleGet returns the rule of a branch, or ErrNotFound when it has none.
func (c *Catalog) BranchRuleGet(ctx context.Context, graph, branch string) (BranchRule, error) {
	return queryOne(ctx, c, c.pool, fmt.Sprintf("get the rule of branch %q of graph %q", branch, graph), scanBranchRule,
		`SELECT `+branchRuleColumns+` FROM branch_rules WHERE graph = $1 AND branch = $2`, graph, branch)
}

// BranchRuleList returns the rules of a graph's branches, by branch.
func (c *Catalog) BranchRuleList(ctx context.Context, graph string) ([]BranchRule, error) {
	return queryAll(ctx, c, c.pool, fmt.Sprintf("list the branch rules of graph %q", graph), scanned(scanBranchRule),
		`SELECT `+branchRuleColumns+` FROM branch_rules WHERE graph = $1 ORDER BY branch`, graph)
}

// BranchRuleDelete removes the rule of a branch; it reports whether there was one.
func (c *Catalog) BranchRuleDelete(ctx context.Context, graph, branch string) (bool, error) {
	tag, err := c.pool.Exec(ctx, `DELETE FROM branch_rules WHERE graph = $1 AND branch = $2`, graph, branch)
	if err != nil {
		return false, c.wrap(fmt.Sprintf("remove the rule of branch %q of graph %q", branch, graph), err)
	}
	return tag.RowsAffected() > 0, nil
}

const branchRuleColumns = `graph, branch, checks, approvals, set_by, updated_at`

func scanBranchRule(row pgx.Row) (BranchRule, error) {
	var r BranchRule
	var checks []byte
	if err := row.Scan(&r.Graph, &r.Branch, &checks, &r.Approvals, &r.SetBy, &r.UpdatedAt); err != nil {
		return BranchRule{}, err
	}
	return r, json.Unmarshal(checks, &r.Checks)
}

// MergeReview is an approval or a rejection of a waiting merge.
type MergeReview struct {
	OpID     string
	Reviewer string
	Approve  bool
	// Comment is an approval's comment or a rejection's reason.
	Comment string
	// SourceHead is the source head the reviewer saw; an approval counts only while it
	// is still the source's head.
	SourceHead string
	CreatedAt  time.Time
}

// MergeReviewInsert records a review of a merge the ledger has.
func (c *Catalog) MergeReviewInsert(ctx context.Context, r MergeReview) (MergeReview, error) {
	what := fmt.Sprintf("record the review of operation %q by %q", r.OpID, r.Reviewer)
	if r.OpID == "" || r.Reviewer == "" || r.SourceHead == "" {
		return MergeReview{}, c.wrap(what, invalid("operation, reviewer and source head are required"))
	}
	return queryOne(ctx, c, c.pool, what, scanMergeReview, `
		INSERT INTO merge_reviews (op_id, reviewer, verdict, comment, source_head)
		SELECT id, $2, $3, $4, $5 FROM operations WHERE id = $1 AND kind = 'merge'
		RETURNING `+mergeReviewColumns, r.OpID, r.Reviewer, verdict(r.Approve), r.Comment, r.SourceHead)
}

// MergeReviewList returns the reviews of a merge, in the order they were recorded.
func (c *Catalog) MergeReviewList(ctx context.Context, opID string) ([]MergeReview, error) {
	return queryAll(ctx, c, c.pool, fmt.Sprintf("list the reviews of operation %q", opID), scanned(scanMergeReview),
		`SELECT `+mergeReviewColumns+` FROM merge_reviews WHERE op_id = $1 ORDER BY seq`, opID)
}

const mergeReviewColumns = `op_id, reviewer, verdict = 'approve', comment, source_head, created_at`

func verdict(approve bool) string {
	if approve {
		return "approve"
	}
	return "reject"
}

func scanMergeReview(row pgx.Row) (MergeReview, error) {
	var r MergeReview
	err := row.Scan(&r.OpID, &r.Reviewer, &r.Approve, &r.Comment, &r.SourceHead, &r.CreatedAt)
	return r, err
}
