package workflows_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/workflows"
)

// Unit tier: CreateTag's and DeleteTag's decisions with every activity
// mocked. The real-stack tier is tags_test.go.

var (
	createTagInput = workflows.CreateTagInput{Graph: "g", Name: "v1", Branch: "main", OpID: "op-tag"}
	tagPrepared    = activities.PrepareTagResult{Recorded: true, Commit: "T-4", Body: []byte("tag v1 of T-4")}
)

func runCreateTag(t *testing.T, prep activities.PrepareTagResult, puts ...activities.TagState) (workflows.CreateTagResult, *decisionEnv) {
	t.Helper()
	d := newDecisionEnv(t, workflows.CreateTagName, workflows.CreateTag)
	answer(d, a.PrepareTag, prep)
	for _, st := range puts {
		answer(d, a.PutTag, activities.PutTagResult{State: st, Message: "tag " + string(st)})
	}
	var res workflows.CreateTagResult
	d.mustRun(createTagInput, &res)
	return res, d
}

func TestCreateTagDecision_PrepareEndsEarly_OutcomePassedThroughNothingPut(t *testing.T) {
	for _, o := range []outcome.Outcome{outcome.NotFound, outcome.NotRetained, outcome.Invalid} {
		t.Run(string(o), func(t *testing.T) {
			res, d := runCreateTag(t, activities.PrepareTagResult{Outcome: o, Message: "why", Recorded: true, Commit: "T-4"})
			if res.Outcome != o || res.Message != "why" || res.Commit != "T-4" {
				t.Fatalf("result %+v, want %s", res, o)
			}
			d.never("PutTag")
			d.finishedOnce("op-tag", catalog.OpTag, o)
		})
	}
}

func TestCreateTagDecision_OpIDOfAnotherRequest_LeavesItsOperationUnfinished(t *testing.T) {
	res, d := runCreateTag(t, activities.PrepareTagResult{Outcome: outcome.Conflict, Foreign: true})
	if res.Outcome != outcome.Conflict {
		t.Fatalf("result %+v, want conflict", res)
	}
	d.never("PutTag", "FinishOperation")
}

func TestCreateTagDecision_TagStored_CreatedWithThePreparedBytes(t *testing.T) {
	res, d := runCreateTag(t, tagPrepared, activities.TagStored)
	if res.Outcome != outcome.Created || res.Existing || res.Commit != "T-4" || res.Name != "v1" {
		t.Fatalf("result %+v, want created (not existing) on T-4", res)
	}
	p := inputsOf[activities.PrepareTagInput](d, "PrepareTag")[0]
	if p.Name != "v1" || p.Branch != "main" || p.Commit != "" || p.OpID != "op-tag" {
		t.Fatalf("prepare input %+v", p)
	}
	got := inputsOf[activities.PutTagInput](d, "PutTag")
	want := activities.PutTagInput{OpID: "op-tag", Graph: "g", Kind: catalog.OpTag, Body: tagPrepared.Body}
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("puts %+v, want one %+v", got, want)
	}
	d.finishedOnce("op-tag", catalog.OpTag, outcome.Created)
}

func TestCreateTagDecision_SameTagAlreadyThere_CreatedAndExisting(t *testing.T) {
	res, d := runCreateTag(t, tagPrepared, activities.TagFound)
	if res.Outcome != outcome.Created || !res.Existing || res.Message != "tag exists" {
		t.Fatalf("result %+v, want created and existing", res)
	}
	d.finishedOnce("op-tag", catalog.OpTag, outcome.Created)
}

func TestCreateTagDecision_TagNotStored_OutcomeOfThePut(t *testing.T) {
	for st, want := range map[activities.TagState]outcome.Outcome{
		activities.TagOther: outcome.Conflict, activities.TagRefused: outcome.Refused, activities.TagInvalid: outcome.Invalid,
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
	res, d := runCreateTag(t, tagPrepared, activities.TagInDoubt, activities.TagInDoubt, activities.TagStored)
	if res.Outcome != outcome.Created || res.SettleAttempts != 2 {
		t.Fatalf("result %+v, want created after 2 re-issues", res)
	}
	if d.count("MarkOperationInDoubt") != 1 {
		t.Fatalf("marked in doubt %d times, want once", d.count("MarkOperationInDoubt"))
	}
	for i, p := range inputsOf[activities.PutTagInput](d, "PutTag") {
		if !bytes.Equal(p.Body, tagPrepared.Body) || p.InDoubtSince.IsZero() != (i == 0) {
			t.Fatalf("put %d %+v: want the prepared bytes, in-doubt-since set on re-issues only", i, p)
		}
	}
	d.finishedOnce("op-tag", catalog.OpTag, outcome.Created)
}

func TestCreateTagDecision_PrepareKeepsFailing_FailsAndRecordsTheFailure(t *testing.T) {
	d := newDecisionEnv(t, workflows.CreateTagName, workflows.CreateTag)
	failWith[activities.PrepareTagResult](d, a.PrepareTag, transient)
	var res workflows.CreateTagResult
	if err := d.run(createTagInput, &res); err == nil {
		t.Fatalf("workflow succeeded although prepare kept failing")
	}
	d.never("PutTag")
	d.finishedOnce("op-tag", catalog.OpTag, "")
}

func TestCreateTagDecision_PutFails_FailsAndRecordsTheFailure(t *testing.T) {
	d := newDecisionEnv(t, workflows.CreateTagName, workflows.CreateTag)
	answer(d, a.PrepareTag, tagPrepared)
	failWith[activities.PutTagResult](d, a.PutTag, permanent("access denied"))
	var res workflows.CreateTagResult
	if err := d.run(createTagInput, &res); err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("err %v, want the put's failure", err)
	}
	d.finishedOnce("op-tag", catalog.OpTag, "")
}

var (
	deleteTagInput    = workflows.DeleteTagInput{Graph: "g", Name: "v1", OpID: "op-untag"}
	deleteTagPrepared = activities.PrepareDeleteTagResult{Recorded: true, ETag: `"t1"`, Commit: "T-4"}
)

func runDeleteTag(t *testing.T, prep activities.PrepareDeleteTagResult, retires ...activities.RetireState) (workflows.DeleteTagResult, *decisionEnv) {
	t.Helper()
	d := newDecisionEnv(t, workflows.DeleteTagName, workflows.DeleteTag)
	answer(d, a.PrepareDeleteTag, prep)
	for _, st := range retires {
		answer(d, a.RetireTag, activities.RetireIncarnationResult{State: st, Message: "retire " + string(st)})
	}
	var res workflows.DeleteTagResult
	d.mustRun(deleteTagInput, &res)
	return res, d
}

func TestDeleteTagDecision_PrepareEndsEarly_OutcomePassedThroughNothingRetired(t *testing.T) {
	res, d := runDeleteTag(t, activities.PrepareDeleteTagResult{Outcome: outcome.NotFound, Message: "already deleted", Recorded: true, Commit: "T-4"})
	if res.Outcome != outcome.NotFound || res.Message != "already deleted" || res.Commit != "T-4" {
		t.Fatalf("result %+v, want not found", res)
	}
	d.never("RetireTag")
	d.finishedOnce("op-untag", catalog.OpTag, outcome.NotFound)
}

func TestDeleteTagDecision_OpIDOfAnotherRequest_LeavesItsOperationUnfinished(t *testing.T) {
	res, d := runDeleteTag(t, activities.PrepareDeleteTagResult{Outcome: outcome.Conflict, Foreign: true})
	if res.Outcome != outcome.Conflict {
		t.Fatalf("result %+v, want conflict", res)
	}
	d.never("RetireTag", "FinishOperation")
}

func TestDeleteTagDecision_RetiredByThisOperationBefore_DeletedWithoutASwap(t *testing.T) {
	prep := deleteTagPrepared
	prep.Retired = true
	res, d := runDeleteTag(t, prep)
	if res.Outcome != workflows.OutcomeDeleted || res.Commit != "T-4" {
		t.Fatalf("result %+v, want deleted", res)
	}
	d.never("RetireTag")
	d.finishedOnce("op-untag", catalog.OpTag, outcome.Deleted)
}

func TestDeleteTagDecision_RetireDone_DeletedBySwappingTheReadTag(t *testing.T) {
	res, d := runDeleteTag(t, deleteTagPrepared, activities.RetireDone)
	if res.Outcome != workflows.OutcomeDeleted || res.Commit != "T-4" {
		t.Fatalf("result %+v, want deleted", res)
	}
	got := inputsOf[activities.RetireTagInput](d, "RetireTag")
	want := activities.RetireTagInput{OpID: "op-untag", Graph: "g", Name: "v1", ETag: deleteTagPrepared.ETag}
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("retires %+v, want one %+v", got, want)
	}
	d.finishedOnce("op-untag", catalog.OpTag, outcome.Deleted)
}

func TestDeleteTagDecision_RetireInDoubt_MarkedAndSettledByReissue(t *testing.T) {
	res, d := runDeleteTag(t, deleteTagPrepared, activities.RetireInDoubt, activities.RetireDone)
	if res.Outcome != workflows.OutcomeDeleted || res.SettleAttempts != 1 {
		t.Fatalf("result %+v, want deleted after 1 re-issue", res)
	}
	ret := inputsOf[activities.RetireTagInput](d, "RetireTag")
	if d.count("MarkOperationInDoubt") != 1 || len(ret) != 2 || ret[1].ETag != deleteTagPrepared.ETag || ret[1].InDoubtSince.IsZero() {
		t.Fatalf("steps %v, retires %+v: want one mark and the same swap re-issued", d.names(), ret)
	}
}

func TestDeleteTagDecision_SwapNotDone_OutcomeOfTheSwap(t *testing.T) {
	for st, want := range map[activities.RetireState]outcome.Outcome{
		activities.RetireChanged: outcome.Conflict, activities.RetireNotLive: outcome.Conflict, activities.RetireRefused: outcome.Refused,
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

func TestDeleteTagDecision_PrepareKeepsFailing_FailsAndRecordsTheFailure(t *testing.T) {
	d := newDecisionEnv(t, workflows.DeleteTagName, workflows.DeleteTag)
	failWith[activities.PrepareDeleteTagResult](d, a.PrepareDeleteTag, transient)
	var res workflows.DeleteTagResult
	if err := d.run(deleteTagInput, &res); err == nil {
		t.Fatalf("workflow succeeded although prepare kept failing")
	}
	d.never("RetireTag")
	d.finishedOnce("op-untag", catalog.OpTag, "")
}

func TestDeleteTagDecision_RetireFails_FailsAndRecordsTheFailure(t *testing.T) {
	d := newDecisionEnv(t, workflows.DeleteTagName, workflows.DeleteTag)
	answer(d, a.PrepareDeleteTag, deleteTagPrepared)
	failWith[activities.RetireIncarnationResult](d, a.RetireTag, permanent("access denied"))
	var res workflows.DeleteTagResult
	if err := d.run(deleteTagInput, &res); err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("err %v, want the retire's failure", err)
	}
	d.finishedOnce("op-untag", catalog.OpTag, "")
}
