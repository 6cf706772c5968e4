package workflows_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/workflows"
)

// Unit tier: Restore's decisions with every activity mocked. The real-stack
// tier is restore_test.go.

var restoreInput = workflows.RestoreInput{Graph: "g", Branch: "main", To: workflows.RestoreTarget{Commit: "T-1"}, OpID: "op-restore"}

var restoreTime = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// restorePrepared is a prepare that found T-1 retained and recorded the operation.
var restorePrepared = activities.PrepareRestoreResult{Owned: true, Target: "T-1", Time: restoreTime}

// restorePlan plans a restore commit on head, backed up by a tag named after head.
func restorePlan(head, commit string) activities.PlanRestoreResult {
	return activities.PlanRestoreResult{Head: head, BackupTag: "backup/main/" + head,
		Tag:    activities.WriteSpec{Kind: activities.WriteTag, Graph: "g", Body: []byte("tag of " + head)},
		Commit: commit, Spec: activities.WriteSpec{Kind: activities.WritePublish, Graph: "g", Body: []byte("body of " + commit), Landed: outcome.Done}}
}

type restoreAnswers struct {
	prep  activities.PrepareRestoreResult
	plans []activities.PlanRestoreResult
	tags  []activities.WriteState
	puts  []activities.WriteState
}

// ofKind selects the writes of one kind.
func ofKind(k activities.WriteKind) any {
	return mock.MatchedBy(func(in activities.WriteInput) bool { return in.Spec.Kind == k })
}

func runRestore(t *testing.T, in workflows.RestoreInput, ans restoreAnswers) (workflows.RestoreResult, *decisionEnv) {
	t.Helper()
	d := newDecisionEnv(t, workflows.RestoreName, workflows.Restore)
	answer(d, a.PrepareRestore, ans.prep)
	answer(d, a.PlanRestore, ans.plans...)
	for _, st := range ans.tags {
		v := verdict(st, "tag "+string(st))
		if st == tagFound {
			v = activities.Verdict{State: activities.Landed, Equivalent: true, Message: "tag exists"}
		}
		d.env.OnActivity(a.Write, mock.Anything, ofKind(activities.WriteTag)).Return(v, nil).Once()
	}
	for _, st := range ans.puts {
		d.env.OnActivity(a.Write, mock.Anything, ofKind(activities.WritePublish)).Return(verdict(st, "put "+string(st)), nil).Once()
	}
	d.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(verdict(activities.Ambiguous, "not there yet"), nil).Maybe()
	var res workflows.RestoreResult
	d.mustRun(in, &res)
	return res, d
}

// writesOf returns the write inputs of one kind, in order.
func (d *decisionEnv) writesOf(k activities.WriteKind) []activities.WriteInput {
	var out []activities.WriteInput
	for _, in := range inputsOf[activities.WriteInput](d, "Write") {
		if in.Spec.Kind == k {
			out = append(out, in)
		}
	}
	return out
}

// kindNames lists the activities started, each Write named with its kind.
func (d *decisionEnv) kindNames() []string {
	var out []string
	for _, st := range d.steps {
		if in, ok := st.in.(activities.WriteInput); ok && st.name == "Write" {
			out = append(out, "Write "+string(in.Spec.Kind))
			continue
		}
		out = append(out, st.name)
	}
	return out
}

func TestRestoreDecision_PrepareEndsEarly_OutcomePassedThroughNothingWritten(t *testing.T) {
	for _, o := range []outcome.Outcome{outcome.NotRetained, outcome.NotFound, outcome.Invalid} {
		t.Run(string(o), func(t *testing.T) {
			res, d := runRestore(t, restoreInput, restoreAnswers{prep: activities.PrepareRestoreResult{Outcome: o, Message: "why", Owned: true}})
			if res.Outcome != o || res.Message != "why" || res.Commit != "" {
				t.Fatalf("result %+v, want %s", res, o)
			}
			d.never("PlanRestore", "Write")
			d.finishedOnce("op-restore", catalog.OpRestore, o)
		})
	}
}

func TestRestoreDecision_OpIDOfAnotherRequest_LeavesItsOperationUnfinished(t *testing.T) {
	res, d := runRestore(t, restoreInput, restoreAnswers{prep: activities.PrepareRestoreResult{Outcome: outcome.Conflict, Owned: false}})
	if res.Outcome != outcome.Conflict {
		t.Fatalf("result %+v, want conflict", res)
	}
	d.never("PlanRestore", "Finish")
}

func TestRestoreDecision_BackupTagThenCommit_Done(t *testing.T) {
	plan := restorePlan("T-5", "T-6")
	res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{plan},
		tags: []activities.WriteState{activities.Landed}, puts: []activities.WriteState{activities.Landed}})
	if res.Outcome != outcome.Done || res.Commit != "T-6" || res.PreviousHead != "T-5" || res.RestoredFrom != "T-1" || res.BackupTag != "backup/main/T-5" {
		t.Fatalf("result %+v, want done at T-6 restoring T-1 with T-5 backed up", res)
	}
	if got := strings.Join(d.kindNames(), ","); !strings.Contains(got, "Write tag,Write publish") {
		t.Fatalf("steps %v: the backup tag must be stored before the commit is sent", got)
	}
	p := inputsOf[activities.PlanRestoreInput](d, "PlanRestore")[0]
	if p.Target != "T-1" || !p.Time.Equal(restoreTime) || p.Owner.OpID != "op-restore" {
		t.Fatalf("plan input %+v, want the prepared target and time", p)
	}
	tag := d.writesOf(activities.WriteTag)[0]
	if !bytes.Equal(tag.Spec.Body, plan.Tag.Body) || tag.Owner.OpID != "op-restore" {
		t.Fatalf("tag put %+v, want the planned tag bytes", tag)
	}
	put := d.writesOf(activities.WritePublish)[0]
	if !bytes.Equal(put.Spec.Body, plan.Spec.Body) {
		t.Fatalf("commit put %+v, want the planned commit bytes", put)
	}
	if d.inDoubtMarks() != 0 {
		t.Fatalf("recorded in doubt although every write answered")
	}
	d.finishedOnce("op-restore", catalog.OpRestore, outcome.Done)
}

func TestRestoreDecision_NoBackup_CommitsWithoutATag(t *testing.T) {
	in := restoreInput
	in.NoBackup = true
	plan := restorePlan("T-5", "T-6")
	plan.BackupTag, plan.Tag = "", activities.WriteSpec{}
	res, d := runRestore(t, in, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{plan},
		puts: []activities.WriteState{activities.Landed}})
	if res.Outcome != outcome.Done || res.Commit != "T-6" || res.BackupTag != "" {
		t.Fatalf("result %+v, want done without a backup tag", res)
	}
	if !inputsOf[activities.PrepareRestoreInput](d, "PrepareRestore")[0].NoBackup || !inputsOf[activities.PlanRestoreInput](d, "PlanRestore")[0].NoBackup {
		t.Fatalf("no_backup was not passed to prepare and plan")
	}
	if n := len(d.writesOf(activities.WriteTag)); n != 0 {
		t.Fatalf("%d tag puts, want none", n)
	}
}

func TestRestoreDecision_BackupTagPutInDoubt_SettlesBeforeTheCommit(t *testing.T) {
	plan := restorePlan("T-5", "T-6")
	res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{plan},
		tags: []activities.WriteState{activities.Ambiguous, activities.Ambiguous, activities.Landed},
		puts: []activities.WriteState{activities.Landed}})
	if res.Outcome != outcome.Done || res.Commit != "T-6" || res.SettleAttempts != 2 || res.BackupTag != plan.BackupTag {
		t.Fatalf("result %+v, want done after the tag settled in 2 re-issues", res)
	}
	want := []string{"PrepareRestore", "PlanRestore", "Write tag", "ReadBack", "ReadBack", "ReadBack", "ReadBack", "Progress",
		"Write tag", "Write tag", "Progress", "Write publish", "Finish"}
	if got := d.kindNames(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("steps %v, want %v", got, want)
	}
	for _, tag := range d.writesOf(activities.WriteTag) {
		if !bytes.Equal(tag.Spec.Body, plan.Tag.Body) {
			t.Fatalf("tag re-issue sent %q, want %q", tag.Spec.Body, plan.Tag.Body)
		}
	}
}

func TestRestoreDecision_BackupTagAlreadyNamesTheHead_Proceeds(t *testing.T) {
	res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{restorePlan("T-5", "T-6")},
		tags: []activities.WriteState{tagFound}, puts: []activities.WriteState{activities.Landed}})
	if res.Outcome != outcome.Done || res.BackupTag != "backup/main/T-5" || res.Commit != "T-6" {
		t.Fatalf("result %+v, want done with the existing backup tag reported", res)
	}
	d.finishedOnce("op-restore", catalog.OpRestore, outcome.Done)
}

func TestRestoreDecision_BackupTagNotStored_EndsBeforeTheCommit(t *testing.T) {
	for st, want := range map[activities.WriteState]outcome.Outcome{
		activities.Other: outcome.Conflict, activities.Refused: outcome.Refused, activities.Invalid: outcome.Invalid,
	} {
		t.Run(string(st), func(t *testing.T) {
			res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{restorePlan("T-5", "T-6")},
				tags: []activities.WriteState{st}})
			if res.Outcome != want || res.Commit != "" || res.BackupTag != "" || res.Message != "backup tag: tag "+string(st) {
				t.Fatalf("result %+v, want %s naming the backup tag", res, want)
			}
			if n := len(d.writesOf(activities.WritePublish)); n != 0 {
				t.Fatalf("%d commit puts, want none", n)
			}
			d.finishedOnce("op-restore", catalog.OpRestore, want)
		})
	}
}

func TestRestoreDecision_EarlierAttemptCommitted_DoneWithoutWrites(t *testing.T) {
	plan := activities.PlanRestoreResult{Committed: true, Commit: "T-6", Head: "T-5"}
	res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{plan}})
	if res.Outcome != outcome.Done || res.Commit != "T-6" || res.PreviousHead != "T-5" {
		t.Fatalf("result %+v, want done at the commit already there", res)
	}
	d.never("Write")
	d.finishedOnce("op-restore", catalog.OpRestore, outcome.Done)
}

func TestRestoreDecision_PlanEndsWithOutcome_NothingWritten(t *testing.T) {
	plan := activities.PlanRestoreResult{Outcome: outcome.Conflict, Message: "the head is T-7, not the expected T-5"}
	in := restoreInput
	in.ExpectedHead = "T-5"
	res, d := runRestore(t, in, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{plan}})
	if res.Outcome != outcome.Conflict || res.Message != plan.Message || res.Commit != "" {
		t.Fatalf("result %+v, want the plan's conflict", res)
	}
	if inputsOf[activities.PlanRestoreInput](d, "PlanRestore")[0].ExpectedHead != "T-5" {
		t.Fatalf("expected head not passed to the plan")
	}
	d.never("Write")
	d.finishedOnce("op-restore", catalog.OpRestore, outcome.Conflict)
}

func TestRestoreDecision_HeadMovedWithoutExpectedHead_BacksUpTheNewHeadAndReplans(t *testing.T) {
	p1, p2 := restorePlan("T-5", "T-6"), restorePlan("T-6", "T-7")
	res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{p1, p2},
		tags: []activities.WriteState{activities.Landed, activities.Landed},
		puts: []activities.WriteState{activities.Other, activities.Landed}})
	if res.Outcome != outcome.Done || res.Commit != "T-7" || res.PreviousHead != "T-6" || res.BackupTag != "backup/main/T-6" || res.HeadRetries != 1 {
		t.Fatalf("result %+v, want done at T-7 with the moved head T-6 backed up", res)
	}
	tags := d.writesOf(activities.WriteTag)
	if len(tags) != 2 || !bytes.Equal(tags[0].Spec.Body, p1.Tag.Body) || !bytes.Equal(tags[1].Spec.Body, p2.Tag.Body) {
		t.Fatalf("tag puts %+v, want a backup of each head replaced", tags)
	}
	if d.count("PrepareRestore") != 1 {
		t.Fatalf("prepared %d times, want once (a re-plan does not re-resolve the target)", d.count("PrepareRestore"))
	}
}

func TestRestoreDecision_HeadMovedWithExpectedHead_ConflictWithoutReplan(t *testing.T) {
	in := restoreInput
	in.ExpectedHead = "T-5"
	res, d := runRestore(t, in, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{restorePlan("T-5", "T-6")},
		tags: []activities.WriteState{activities.Landed}, puts: []activities.WriteState{activities.Other}})
	if res.Outcome != outcome.Conflict || res.Commit != "" || !strings.Contains(res.Message, "T-5") {
		t.Fatalf("result %+v, want a conflict naming the expected head", res)
	}
	if d.count("PlanRestore") != 1 {
		t.Fatalf("planned %d times, want once", d.count("PlanRestore"))
	}
	d.finishedOnce("op-restore", catalog.OpRestore, outcome.Conflict)
}

func TestRestoreDecision_HeadKeepsMoving_ConflictAfterMaxHeadRetries(t *testing.T) {
	ans := restoreAnswers{prep: restorePrepared}
	for i := 0; i <= workflows.MaxHeadRetries; i++ {
		plan := restorePlan("T-5", "T-6")
		plan.BackupTag, plan.Tag = "", activities.WriteSpec{}
		ans.plans = append(ans.plans, plan)
		ans.puts = append(ans.puts, activities.Other)
	}
	res, d := runRestore(t, restoreInput, ans)
	if res.Outcome != outcome.Conflict || res.HeadRetries != workflows.MaxHeadRetries || d.count("PlanRestore") != workflows.MaxHeadRetries+1 {
		t.Fatalf("result %+v after %d plans, want conflict after %d", res, d.count("PlanRestore"), workflows.MaxHeadRetries+1)
	}
}

func TestRestoreDecision_CommitRefusedOrInvalid_EndsWithoutCommit(t *testing.T) {
	for st, want := range map[activities.WriteState]outcome.Outcome{activities.Refused: outcome.Refused, activities.Invalid: outcome.Invalid} {
		t.Run(string(st), func(t *testing.T) {
			res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{restorePlan("T-5", "T-6")},
				tags: []activities.WriteState{activities.Landed}, puts: []activities.WriteState{st}})
			if res.Outcome != want || res.Commit != "" || res.Message != "put "+string(st) {
				t.Fatalf("result %+v, want %s", res, want)
			}
			d.finishedOnce("op-restore", catalog.OpRestore, want)
		})
	}
}

func TestRestoreDecision_TagThenCommitInDoubt_EachSettled(t *testing.T) {
	res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{restorePlan("T-5", "T-6")},
		tags: []activities.WriteState{activities.Ambiguous, activities.Landed},
		puts: []activities.WriteState{activities.Ambiguous, activities.Landed}})
	if res.Outcome != outcome.Done || res.Commit != "T-6" || res.SettleAttempts != 2 {
		t.Fatalf("result %+v, want done after one re-issue of each write", res)
	}
	if d.inDoubtMarks() != 2 {
		t.Fatalf("recorded in doubt %d times, want once per write that settled", d.inDoubtMarks())
	}
}

func TestRestoreDecision_PlanFails_FailsAndRecordsTheFailure(t *testing.T) {
	d := newDecisionEnv(t, workflows.RestoreName, workflows.Restore)
	answer(d, a.PrepareRestore, restorePrepared)
	failWith[activities.PlanRestoreResult](d, a.PlanRestore, permanent("ledger schema missing"))
	var res workflows.RestoreResult
	if err := d.run(restoreInput, &res); err == nil || !strings.Contains(err.Error(), "ledger schema missing") {
		t.Fatalf("err %v, want the plan's failure", err)
	}
	d.never("Write")
	d.finishedOnce("op-restore", catalog.OpRestore, "")
}
