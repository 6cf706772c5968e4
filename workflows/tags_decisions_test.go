package workflows_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/mock"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/workflows"
)

// Unit tier: CreateTag's and DeleteTag's decisions with every activity
// mocked. The real-stack tier is tags_test.go.

var (
	createTagInput = workflows.CreateTagInput{Graph: "g", Name: "v1", Branch: "main", OpID: "op-tag"}
	tagPrepared    = activities.PrepareTagResult{Owned: true, Commit: "T-4",
		Spec: activities.WriteSpec{Kind: activities.WriteTag, Graph: "g", Body: []byte("tag v1 of T-4"), Landed: outcome.Created}}
	// tagFound is a put that found another operation's live tag of the same commit.
	tagFound = activities.WriteState("found")
)

func runCreateTag(t *testing.T, prep activities.PrepareTagResult, puts ...activities.WriteState) (workflows.CreateTagResult, *decisionEnv) {
	t.Helper()
	d := newDecisionEnv(t, workflows.CreateTagName, workflows.CreateTag)
	answer(d, a.PrepareTag, prep)
	for _, st := range puts {
		v := verdict(st, "tag "+string(st))
		if st == tagFound {
			v = activities.Verdict{State: activities.Landed, Equivalent: true, Message: "tag exists"}
		}
		answer(d, a.Write, v)
	}
	d.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(verdict(activities.Ambiguous, "not there yet"), nil).Maybe()
	var res workflows.CreateTagResult
	d.mustRun(createTagInput, &res)
	return res, d
}

func TestCreateTagDecision_PrepareEndsEarly_OutcomePassedThroughNothingPut(t *testing.T) {
	for _, o := range []outcome.Outcome{outcome.NotFound, outcome.NotRetained, outcome.Invalid} {
		t.Run(string(o), func(t *testing.T) {
			res, d := runCreateTag(t, activities.PrepareTagResult{Outcome: o, Message: "why", Owned: true, Commit: "T-4"})
			if res.Outcome != o || res.Message != "why" || res.Commit != "T-4" {
				t.Fatalf("result %+v, want %s", res, o)
			}
			d.never("Write")
			d.finishedOnce("op-tag", catalog.OpTag, o)
		})
	}
}

func TestCreateTagDecision_OpIDOfAnotherRequest_LeavesItsOperationUnfinished(t *testing.T) {
	res, d := runCreateTag(t, activities.PrepareTagResult{Outcome: outcome.Conflict, Owned: false})
	if res.Outcome != outcome.Conflict {
		t.Fatalf("result %+v, want conflict", res)
	}
	d.never("Write", "Finish")
}

func TestCreateTagDecision_TagStored_CreatedWithThePreparedBytes(t *testing.T) {
	res, d := runCreateTag(t, tagPrepared, activities.Landed)
	if res.Outcome != outcome.Created || res.Existing || res.Commit != "T-4" || res.Name != "v1" {
		t.Fatalf("result %+v, want created (not existing) on T-4", res)
	}
	p := inputsOf[activities.PrepareTagInput](d, "PrepareTag")[0]
	if p.Name != "v1" || p.Branch != "main" || p.Commit != "" || p.OpID != "op-tag" {
		t.Fatalf("prepare input %+v", p)
	}
	got := d.written()
	if len(got) != 1 || !reflect.DeepEqual(got[0], tagPrepared.Spec) {
		t.Fatalf("puts %+v, want one %+v", got, tagPrepared.Spec)
	}
	d.finishedOnce("op-tag", catalog.OpTag, outcome.Created)
}

func TestCreateTagDecision_SameTagAlreadyThere_CreatedAndExisting(t *testing.T) {
	res, d := runCreateTag(t, tagPrepared, tagFound)
	if res.Outcome != outcome.Created || !res.Existing || res.Message != "tag exists" {
		t.Fatalf("result %+v, want created and existing", res)
	}
	d.finishedOnce("op-tag", catalog.OpTag, outcome.Created)
}

func TestCreateTagDecision_TagNotStored_OutcomeOfThePut(t *testing.T) {
	for st, want := range map[activities.WriteState]outcome.Outcome{
		activities.Other: outcome.Conflict, activities.Refused: outcome.Refused, activities.Invalid: outcome.Invalid,
	} {
		t.Run(string(st), func(t *testing.T) {
			res, d := runCreateTag(t, tagPrepared, st)
			if res.Outcome != want || res.Existing || res.Message != "tag "+string(st) {
				t.Fatalf("result %+v, want %s", res, want)
			}
			d.finishedOnce("op-tag", catalog.OpTag, want)
		})
	}
}

func TestCreateTagDecision_PutInDoubt_MarkedAndSettledByReissuingTheSameBytes(t *testing.T) {
	res, d := runCreateTag(t, tagPrepared, activities.Ambiguous, activities.Ambiguous, activities.Landed)
	if res.Outcome != outcome.Created || res.SettleAttempts != 2 {
		t.Fatalf("result %+v, want created after 2 re-issues", res)
	}
	if d.inDoubtMarks() != 1 {
		t.Fatalf("marked in doubt %d times, want once", d.inDoubtMarks())
	}
	for i, p := range inputsOf[activities.WriteInput](d, "Write") {
		if !bytes.Equal(p.Spec.Body, tagPrepared.Spec.Body) || p.Attempt != i {
			t.Fatalf("put %d %+v: want the prepared bytes, attempt %d", i, p, i)
		}
	}
	d.finishedOnce("op-tag", catalog.OpTag, outcome.Created)
}

var (
	deleteTagInput    = workflows.DeleteTagInput{Graph: "g", Name: "v1", OpID: "op-untag"}
	deleteTagPrepared = activities.PrepareDeleteTagResult{Owned: true, Commit: "T-4",
		Spec: activities.WriteSpec{Kind: activities.WriteRetireTag, Graph: "g", Name: "v1", ETag: `"t1"`, Landed: outcome.Deleted}}
)

func runDeleteTag(t *testing.T, prep activities.PrepareDeleteTagResult, retires ...activities.WriteState) (workflows.DeleteTagResult, *decisionEnv) {
	t.Helper()
	d := newDecisionEnv(t, workflows.DeleteTagName, workflows.DeleteTag)
	answer(d, a.PrepareDeleteTag, prep)
	for _, st := range retires {
		answer(d, a.Write, verdict(st, "retire "+string(st)))
	}
	d.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(verdict(activities.Ambiguous, "still live"), nil).Maybe()
	var res workflows.DeleteTagResult
	d.mustRun(deleteTagInput, &res)
	return res, d
}

func TestDeleteTagDecision_PrepareEndsEarly_OutcomePassedThroughNothingRetired(t *testing.T) {
	res, d := runDeleteTag(t, activities.PrepareDeleteTagResult{Outcome: outcome.NotFound, Message: "already deleted", Owned: true, Commit: "T-4"})
	if res.Outcome != outcome.NotFound || res.Message != "already deleted" || res.Commit != "T-4" {
		t.Fatalf("result %+v, want not found", res)
	}
	d.never("Write")
	d.finishedOnce("op-untag", catalog.OpTag, outcome.NotFound)
}

func TestDeleteTagDecision_OpIDOfAnotherRequest_LeavesItsOperationUnfinished(t *testing.T) {
	res, d := runDeleteTag(t, activities.PrepareDeleteTagResult{Outcome: outcome.Conflict, Owned: false})
	if res.Outcome != outcome.Conflict {
		t.Fatalf("result %+v, want conflict", res)
	}
	d.never("Write", "Finish")
}

func TestDeleteTagDecision_RetiredByThisOperationBefore_DeletedWithoutASwap(t *testing.T) {
	prep := deleteTagPrepared
	prep.Retired = true
	res, d := runDeleteTag(t, prep)
	if res.Outcome != workflows.OutcomeDeleted || res.Commit != "T-4" {
		t.Fatalf("result %+v, want deleted", res)
	}
	d.never("Write")
	d.finishedOnce("op-untag", catalog.OpTag, outcome.Deleted)
}

func TestDeleteTagDecision_RetireDone_DeletedBySwappingTheReadTag(t *testing.T) {
	res, d := runDeleteTag(t, deleteTagPrepared, activities.Landed)
	if res.Outcome != workflows.OutcomeDeleted || res.Commit != "T-4" {
		t.Fatalf("result %+v, want deleted", res)
	}
	got := d.written()
	if len(got) != 1 || !reflect.DeepEqual(got[0], deleteTagPrepared.Spec) {
		t.Fatalf("retires %+v, want one %+v", got, deleteTagPrepared.Spec)
	}
	d.finishedOnce("op-untag", catalog.OpTag, outcome.Deleted)
}

func TestDeleteTagDecision_RetireInDoubt_MarkedAndSettledByReissue(t *testing.T) {
	res, d := runDeleteTag(t, deleteTagPrepared, activities.Ambiguous, activities.Landed)
	if res.Outcome != workflows.OutcomeDeleted || res.SettleAttempts != 1 {
		t.Fatalf("result %+v, want deleted after 1 re-issue", res)
	}
	ret := inputsOf[activities.WriteInput](d, "Write")
	if d.inDoubtMarks() != 1 || len(ret) != 2 || ret[1].Spec.ETag != deleteTagPrepared.Spec.ETag || ret[1].Attempt != 1 {
		t.Fatalf("steps %v, retires %+v: want one mark and the same swap re-issued", d.names(), ret)
	}
}

func TestDeleteTagDecision_SwapNotDone_OutcomeOfTheSwap(t *testing.T) {
	for st, want := range map[activities.WriteState]outcome.Outcome{
		activities.Other: outcome.Conflict, activities.Refused: outcome.Refused,
	} {
		t.Run(string(st), func(t *testing.T) {
			res, d := runDeleteTag(t, deleteTagPrepared, st)
			if res.Outcome != want || !strings.Contains(res.Message, "retire "+string(st)) {
				t.Fatalf("result %+v, want %s carrying the swap's message", res, want)
			}
			d.finishedOnce("op-untag", catalog.OpTag, want)
		})
	}
}
