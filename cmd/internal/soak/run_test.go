package soak

import (
	"errors"
	"fmt"
	"testing"

	"go.temporal.io/api/serviceerror"

	"github.com/graftworks/graft/storage"
)

// A check whose call met a stack that did not answer — a dev server just restarted
// and not serving its namespace yet, an unreachable frontend — leaves the schedule
// unjudged; any other failed check is a violation, and a judged schedule keeps the
// first reason it could not be judged.
func TestViolateUnlessDown_StackNotAnsweringIsUnjudgedOtherErrorsViolate(t *testing.T) {
	down := []error{
		serviceerror.NewNamespaceNotFound("default"),
		fmt.Errorf("create branch: %w", serviceerror.NewNamespaceNotFound("default")),
		errors.New("start workflow: Namespace default is not found."),
		serviceerror.NewUnavailable("connection closed"),
		errors.New(`dial tcp 127.0.0.1:7233: connect: connection refused`),
	}
	for _, err := range down {
		r := &runner{res: &Result{}}
		r.violateUnlessDown(err, "name-reusable", "creating it again: %v", err)
		if len(r.res.Violations) != 0 || r.res.Err == nil {
			t.Errorf("%v: violations %v, err %v; want unjudged", err, r.res.Violations, r.res.Err)
		}
		if !r.res.Failed() {
			t.Errorf("%v: an unjudged schedule must not count as passed", err)
		}
	}
	answered := []error{
		nil,
		errors.New("branch feature/a is free but creating it ended conflict"),
		fmt.Errorf("put ref: %w", storage.ErrAmbiguous),
		serviceerror.NewNotFound("workflow not found"),
	}
	for _, err := range answered {
		r := &runner{res: &Result{}}
		r.violateUnlessDown(err, "name-reusable", "creating it again: %v", err)
		if len(r.res.Violations) != 1 || r.res.Err != nil {
			t.Errorf("%v: violations %v, err %v; want one violation", err, r.res.Violations, r.res.Err)
		}
	}
	r := &runner{res: &Result{}}
	r.violateUnlessDown(serviceerror.NewUnavailable("first"), "reconciler-ends", "x")
	r.violateUnlessDown(serviceerror.NewUnavailable("second"), "next-cleanup-runs", "x")
	if got := r.res.Err.Error(); got != "check reconciler-ends: the stack did not answer: first" {
		t.Errorf("err = %q, want the first reason kept", got)
	}
}
