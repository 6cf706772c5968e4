package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/workflows"
)

// Unit tier: Cleanup's decisions with every activity mocked. The real-stack
// tier is cleanup_test.go and cleanup_faults_test.go.

const cleanupRunID = "01JRUNRUNRUNRUNRUNRUNRUNRU"

var markNow = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// cleanupScript is what the mocked cleanup activities answer.
type cleanupScript struct {
	begins []activities.CleanupBeginResult
	trees  activities.CleanupMarkTreesResult
	// tables answers CleanupMarkTable by table; a table missing here fails its mark.
	tables map[string]activities.CleanupMarkTableResult
	// sweeps answers CleanupSweep by sweepKey, one answer per call, in order.
	sweeps map[string][]activities.CleanupSweepProgress
	// summaries answers CleanupSummarize by run id.
	summaries map[string]activities.CleanupSummary
	// sweepErr, when set, is every sweep's answer.
	sweepErr error
	// markDelay holds each table mark this long (real time), to observe parallelism.
	markDelay time.Duration
}

// sweepKey names a sweep range: run, prefix and kind.
func sweepKey(run, prefix, kind string) string { return run + "|" + prefix + "|" + kind }

// cleanupEnv records what the ordinary (non-local) cleanup activities were asked.
type cleanupEnv struct {
	*decisionEnv
	mu            sync.Mutex
	treeInputs    []activities.CleanupMarkTreesInput
	tableInputs   []activities.CleanupMarkTableInput
	sweepInputs   []activities.CleanupSweepInput
	marking       int
	maxConcurrent int
}

func newCleanupEnv(t *testing.T, s cleanupScript) *cleanupEnv {
	t.Helper()
	c := &cleanupEnv{decisionEnv: newDecisionEnv(t, workflows.CleanupName, workflows.Cleanup)}
	env := c.env
	answer(c.decisionEnv, a.CleanupBegin, s.begins...)
	env.OnActivity(a.CleanupMarkTrees, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.CleanupMarkTreesInput) (activities.CleanupMarkTreesResult, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.treeInputs = append(c.treeInputs, in)
			return s.trees, nil
		}).Maybe()
	env.OnActivity(a.CleanupMarkTable, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.CleanupMarkTableInput) (activities.CleanupMarkTableResult, error) {
			c.mu.Lock()
			c.tableInputs = append(c.tableInputs, in)
			c.marking++
			c.maxConcurrent = max(c.maxConcurrent, c.marking)
			c.mu.Unlock()
			time.Sleep(s.markDelay)
			c.mu.Lock()
			c.marking--
			c.mu.Unlock()
			res, ok := s.tables[in.Table]
			if !ok {
				return res, permanent("no listing for table " + in.Table)
			}
			return res, nil
		}).Maybe()
	env.OnActivity(a.CleanupSweep, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.CleanupSweepInput) (activities.CleanupSweepProgress, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.sweepInputs = append(c.sweepInputs, in)
			if s.sweepErr != nil {
				return activities.CleanupSweepProgress{}, s.sweepErr
			}
			k := sweepKey(in.RunID, in.Prefix, in.Kind)
			if len(s.sweeps[k]) == 0 {
				return activities.CleanupSweepProgress{}, permanent("unexpected sweep " + k)
			}
			p := s.sweeps[k][0]
			s.sweeps[k] = s.sweeps[k][1:]
			return p, nil
		}).Maybe()
	env.OnActivity(a.CleanupSummarize, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.CleanupSummarizeInput) (activities.CleanupSummary, error) {
			return s.summaries[in.RunID], nil
		}).Maybe()
	env.OnActivity(a.CleanupUploads, mock.Anything, mock.Anything).Return(activities.CleanupUploadsResult{}, nil).Maybe()
	env.OnActivity(a.CleanupFinish, mock.Anything, mock.Anything).Return(nil).Maybe()
	return c
}

// sweepKeys lists the sweeps sent, as sweepKey plus the key they resumed after.
func (c *cleanupEnv) sweepKeys() []string {
	var out []string
	for _, in := range c.sweepInputs {
		out = append(out, sweepKey(in.RunID, in.Prefix, in.Kind)+" after "+in.After)
	}
	return out
}

// finishes returns the CleanupFinish inputs with their reports decoded.
func (c *cleanupEnv) finishes() ([]activities.CleanupFinishInput, []workflows.CleanupResult) {
	c.t.Helper()
	fin := inputsOf[activities.CleanupFinishInput](c.decisionEnv, "CleanupFinish")
	reports := make([]workflows.CleanupResult, len(fin))
	for i, f := range fin {
		if err := json.Unmarshal(f.Report, &reports[i]); err != nil {
			c.t.Fatalf("finish %d report %s: %v", i, f.Report, err)
		}
	}
	return fin, reports
}

func runCleanup(t *testing.T, in workflows.CleanupInput, s cleanupScript) (workflows.CleanupResult, *cleanupEnv) {
	t.Helper()
	c := newCleanupEnv(t, s)
	var res workflows.CleanupResult
	c.mustRun(in, &res)
	return res, c
}

func cleanupIn(mode workflows.CleanupMode) workflows.CleanupInput {
	return workflows.CleanupInput{Graph: "g", KeepNewest: 3, Mode: mode, RunID: cleanupRunID}
}

// threeTables is a mark of trees with 5 condemned commits and tables a
// (versions and objects condemned), b (objects only) and c (nothing).
func threeTables() cleanupScript {
	return cleanupScript{
		begins: []activities.CleanupBeginResult{{}},
		trees: activities.CleanupMarkTreesResult{Now: markNow, Tables: []string{"a", "b", "c"},
			Retained:  map[string][]string{"a": {"VA1"}, "c": {"VC1"}},
			Kept:      workflows.CleanupKept{Head: 2, LiveWindow: 4},
			Condemned: workflows.CleanupCounts{Commits: 5, Bytes: 500}, PlanKeys: []string{"g/trees/x/1"}},
		tables: map[string]activities.CleanupMarkTableResult{
			"a": {Kept: workflows.CleanupKept{Referenced: 1}, Condemned: workflows.CleanupCounts{Versions: 2, Objects: 3, Bytes: 50}},
			"b": {Condemned: workflows.CleanupCounts{Objects: 1, Bytes: 10}},
			"c": {Kept: workflows.CleanupKept{Referenced: 2}},
		},
		summaries: map[string]activities.CleanupSummary{},
	}
}

func TestCleanupDecision_InvalidInput_NothingRuns(t *testing.T) {
	neg := -time.Minute
	for _, tc := range []struct {
		name, want string
		edit       func(*workflows.CleanupInput)
	}{
		{"no graph", "graph is required", func(in *workflows.CleanupInput) { in.Graph = "" }},
		{"no mode", "mode must be", func(in *workflows.CleanupInput) { in.Mode = "" }},
		{"unknown mode", "mode must be", func(in *workflows.CleanupInput) { in.Mode = "purge" }},
		{"plan without sweep", "sweep_run_id needs mode sweep", func(in *workflows.CleanupInput) { in.SweepRunID = "01JPLAN" }},
		{"negative window", "must not be negative", func(in *workflows.CleanupInput) { in.KeepNewest = -1 }},
		{"no window", "give keep_newest", func(in *workflows.CleanupInput) { in.KeepNewest = 0 }},
		{"negative guard", "guard_window", func(in *workflows.CleanupInput) { in.GuardWindow = &neg }},
		{"batch too big", "batch_size", func(in *workflows.CleanupInput) { in.Tuning = &workflows.CleanupTuning{BatchSize: 1001} }},
		{"bad run id", "run_id", func(in *workflows.CleanupInput) { in.RunID = "not an id" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := cleanupIn(workflows.CleanupModeMark)
			tc.edit(&in)
			res, c := runCleanup(t, in, cleanupScript{})
			if res.Outcome != outcome.Invalid || !strings.Contains(res.Message, tc.want) || res.RunID != "" {
				t.Fatalf("result %+v, want invalid saying %q", res, tc.want)
			}
			if len(c.steps) != 0 {
				t.Fatalf("steps %v, want none for an invalid input", c.names())
			}
		})
	}
}

func TestCleanupDecision_DryRun_NeverCallsSweep(t *testing.T) {
	s := threeTables()
	s.summaries[cleanupRunID] = activities.CleanupSummary{} // a dry run condemns nothing in the ledger
	res, c := runCleanup(t, cleanupIn(workflows.CleanupModeDryRun), s)
	wantCondemned := workflows.CleanupCounts{Commits: 5, Versions: 2, Objects: 4, Bytes: 560}
	if res.Outcome != outcome.Done || res.Condemned != workflows.CleanupCounts(wantCondemned) || res.PlanKeyCount != 11 || res.Tables != 3 {
		t.Fatalf("result %+v, want done reporting the mark's plan %+v", res, wantCondemned)
	}
	if res.Kept != (workflows.CleanupKept{Head: 2, LiveWindow: 4, Referenced: 3}) {
		t.Fatalf("kept %+v, want the trees' and tables' kept counts added", res.Kept)
	}
	c.never("CleanupSweep")
	fin, reports := c.finishes()
	if len(fin) != 1 || fin[0].Failed || fin[0].Aborted || fin[0].RunID != cleanupRunID || reports[0].Outcome != outcome.Done || reports[0].Mode != workflows.CleanupModeDryRun {
		t.Fatalf("finishes %+v (reports %+v), want one done dry-run report", fin, reports)
	}
	for _, in := range c.tableInputs {
		if in.Mode != string(workflows.CleanupModeDryRun) {
			t.Fatalf("table mark %+v, want mode dry_run", in)
		}
	}
}

func TestCleanupDecision_Mark_PersistsThePlanWithoutSweeping(t *testing.T) {
	s := threeTables()
	ledger := workflows.CleanupCounts{Commits: 5, Versions: 2, Objects: 3, Bytes: 550} // the ledger's exact count wins
	s.summaries[cleanupRunID] = activities.CleanupSummary{Condemned: ledger}
	res, c := runCleanup(t, cleanupIn(workflows.CleanupModeMark), s)
	if res.Outcome != outcome.Done || res.Condemned != workflows.CleanupCounts(ledger) || res.PlanKeyCount != ledger.Keys() || res.Deleted.Keys() != 0 {
		t.Fatalf("result %+v, want done with the ledger's condemned count", res)
	}
	c.never("CleanupSweep")
	if fin, _ := c.finishes(); len(fin) != 1 || fin[0].Failed {
		t.Fatalf("finishes %+v, want one done", fin)
	}
}

func TestCleanupDecision_Sweep_CommitsBeforeVersionsBeforeObjects(t *testing.T) {
	s := threeTables()
	trees := "g/trees/"
	av, ao, bo := format.TableVersionsPrefix("g", "a"), format.TableObjectsPrefix("g", "a"), format.TableObjectsPrefix("g", "b")
	s.sweeps = map[string][]activities.CleanupSweepProgress{
		sweepKey(cleanupRunID, trees, "commit"): {{After: "k3", Deleted: 3, Bytes: 300}, {After: "k5", Deleted: 2, Bytes: 200, Done: true}},
		sweepKey(cleanupRunID, av, ""):          {{After: "v2", Deleted: 2, Bytes: 20, Done: true}},
		sweepKey(cleanupRunID, ao, ""):          {{After: "o2", Deleted: 2, Bytes: 20}, {After: "o3", Deleted: 1, Bytes: 10, Done: true}},
		sweepKey(cleanupRunID, bo, ""):          {{After: "o1", Deleted: 1, Bytes: 10, Done: true}},
	}
	deleted := workflows.CleanupCounts{Commits: 5, Versions: 2, Objects: 4, Bytes: 560}
	s.summaries[cleanupRunID] = activities.CleanupSummary{Condemned: deleted, Deleted: deleted}
	res, c := runCleanup(t, cleanupIn(workflows.CleanupModeSweep), s)
	if res.Outcome != outcome.Done || res.Deleted != workflows.CleanupCounts(deleted) || res.Sweep.Activities != 6 || res.Sweep.ContinuedAsNew != 0 {
		t.Fatalf("result %+v, want done with everything deleted in 6 sweep activities", res)
	}
	got := c.sweepKeys()
	if len(got) != 6 || got[0] != sweepKey(cleanupRunID, trees, "commit")+" after " || got[1] != sweepKey(cleanupRunID, trees, "commit")+" after k3" {
		t.Fatalf("sweeps %v, want the commits first, resuming after the last key", got)
	}
	if i, j := slices.Index(got, sweepKey(cleanupRunID, av, "")+" after "), slices.Index(got, sweepKey(cleanupRunID, ao, "")+" after "); i < 2 || j < i {
		t.Fatalf("sweeps %v, want a's versions after the commits and before a's objects", got)
	}
	if !slices.Contains(got, sweepKey(cleanupRunID, ao, "")+" after o2") || !slices.Contains(got, sweepKey(cleanupRunID, bo, "")+" after ") {
		t.Fatalf("sweeps %v, want a's objects resumed after o2 and b's objects swept (b has no condemned version)", got)
	}
	for _, in := range c.sweepInputs {
		if strings.Contains(in.Prefix, "/c/") {
			t.Fatalf("swept table c, which had nothing condemned: %v", got)
		}
		if in.BatchSize != workflows.DefaultCleanupTuning.BatchSize || in.MaxBatches != workflows.DefaultCleanupTuning.BatchesPerActivity {
			t.Fatalf("sweep %+v, want the default batch tuning", in)
		}
	}
	if c.last("CleanupSweep") > c.first("CleanupSummarize") {
		t.Fatalf("steps %v: summarised before the sweep ended", c.names())
	}
}

func TestCleanupDecision_MarkTables_GetTheTreesDecision(t *testing.T) {
	for _, tc := range []struct {
		name  string
		guard *time.Duration
		want  time.Duration
	}{{"default guard", nil, workflows.DefaultGuardWindow}, {"guard off", noGuard(), 0}} {
		t.Run(tc.name, func(t *testing.T) {
			s := threeTables()
			s.trees.RetainAllData = true
			in := cleanupIn(workflows.CleanupModeMark)
			in.GuardWindow = tc.guard
			res, c := runCleanup(t, in, s)
			if res.Policy.GuardWindow != tc.want {
				t.Fatalf("policy %+v, want guard window %s", res.Policy, tc.want)
			}
			if len(c.tableInputs) != 3 {
				t.Fatalf("%d table marks, want 3", len(c.tableInputs))
			}
			for _, m := range c.tableInputs {
				if m.GuardWindow != tc.want || !m.Now.Equal(markNow) || !m.RetainAll || m.RunID != cleanupRunID ||
					!reflect.DeepEqual(m.Retained, s.trees.Retained[m.Table]) {
					t.Fatalf("table mark %+v, want guard %s, the trees' time, retain-all and the table's retained versions", m, tc.want)
				}
			}
		})
	}
}

func TestCleanupDecision_SweepRunID_DefaultsToSweepAndLimitsToThePlan(t *testing.T) {
	s := threeTables()
	s.trees.Condemned, s.tables = workflows.CleanupCounts{}, map[string]activities.CleanupMarkTableResult{"a": {}, "b": {}, "c": {}}
	s.summaries[cleanupRunID] = activities.CleanupSummary{Condemned: workflows.CleanupCounts{Objects: 4}, PlanKeys: 7}
	in := cleanupIn("")
	in.SweepRunID = "01JPLANPLANPLANPLANPLANPLA"
	res, c := runCleanup(t, in, s)
	if res.Outcome != outcome.Done || res.Mode != workflows.CleanupModeSweep || res.PlanRunID != in.SweepRunID || res.PlanDropped != 3 {
		t.Fatalf("result %+v, want a sweep of the plan with 3 planned keys dropped", res)
	}
	begin := inputsOf[activities.CleanupBeginInput](c.decisionEnv, "CleanupBegin")[0]
	sum := inputsOf[activities.CleanupSummarizeInput](c.decisionEnv, "CleanupSummarize")[0]
	if begin.Mode != activities.CleanupModeSweep || begin.PlanRunID != in.SweepRunID || sum.PlanRunID != in.SweepRunID {
		t.Fatalf("begin %+v, summarize %+v: want mode sweep limited to the plan", begin, sum)
	}
	if c.treeInputs[0].PlanRunID != in.SweepRunID || c.tableInputs[0].PlanRunID != in.SweepRunID {
		t.Fatalf("marks were not limited to the plan: %+v / %+v", c.treeInputs[0], c.tableInputs[0])
	}
}

func TestCleanupDecision_NoRunID_AFreshULIDNamesTheRun(t *testing.T) {
	s := threeTables()
	in := cleanupIn(workflows.CleanupModeMark)
	in.RunID = ""
	res, c := runCleanup(t, in, s)
	if _, err := ulid.ParseStrict(res.RunID); err != nil {
		t.Fatalf("run id %q: %v", res.RunID, err)
	}
	begin := inputsOf[activities.CleanupBeginInput](c.decisionEnv, "CleanupBegin")[0]
	if begin.RunID != res.RunID || c.treeInputs[0].RunID != res.RunID || begin.WorkflowID != decisionWorkflowID {
		t.Fatalf("begin %+v, trees %+v: want every step under run %s", begin, c.treeInputs[0], res.RunID)
	}
}

func TestCleanupDecision_AnotherRunActive_ConflictWithoutMarking(t *testing.T) {
	s := cleanupScript{begins: []activities.CleanupBeginResult{{Outcome: outcome.Conflict, Message: "run R1 is active", ActiveRunID: "R1"}}}
	res, c := runCleanup(t, cleanupIn(workflows.CleanupModeSweep), s)
	if res.Outcome != outcome.Conflict || res.ActiveRunID != "R1" || res.Message != "run R1 is active" {
		t.Fatalf("result %+v, want conflict naming R1", res)
	}
	c.never("CleanupMarkTrees", "CleanupMarkTable", "CleanupSweep", "CleanupSummarize", "CleanupFinish")
}

func TestCleanupDecision_OrphanedSweepRun_SweptAndFinishedBeforeThisRunBegins(t *testing.T) {
	s := threeTables()
	s.begins = []activities.CleanupBeginResult{{Orphan: &activities.CleanupOrphan{RunID: "R0", Mode: "sweep", WorkflowID: "wf0"}}, {}}
	s.sweeps = map[string][]activities.CleanupSweepProgress{
		sweepKey("R0", "g/trees/", "commit"):         {{Done: true, Deleted: 1}},
		sweepKey("R0", "g/chunks/", ""):              {{Done: true}},
		sweepKey("R0", "g/tables/", "table_version"): {{After: "v9", Deleted: 1}, {Done: true}},
		sweepKey("R0", "g/tables/", "object"):        {{Done: true, Deleted: 4}},
	}
	orphanCounts := workflows.CleanupCounts{Commits: 1, Versions: 1, Objects: 4}
	s.summaries["R0"] = activities.CleanupSummary{Condemned: orphanCounts, Deleted: orphanCounts}
	res, c := runCleanup(t, cleanupIn(workflows.CleanupModeMark), s)
	if res.Outcome != outcome.Done || !reflect.DeepEqual(res.Adopted, []string{"R0"}) {
		t.Fatalf("result %+v, want done after adopting R0", res)
	}
	want := []string{
		sweepKey("R0", "g/trees/", "commit") + " after ",
		sweepKey("R0", "g/chunks/", "") + " after ",
		sweepKey("R0", "g/tables/", "table_version") + " after ",
		sweepKey("R0", "g/tables/", "table_version") + " after v9",
		sweepKey("R0", "g/tables/", "object") + " after ",
	}
	if got := c.sweepKeys(); !reflect.DeepEqual(got, want) {
		t.Fatalf("sweeps %v, want the orphan's commits, then pins and lineage chunks, then versions, then objects: %v", got, want)
	}
	fin, reports := c.finishes()
	if len(fin) != 2 || fin[0].RunID != "R0" || fin[0].Aborted || fin[0].Failed || reports[0].Deleted != workflows.CleanupCounts(orphanCounts) || fin[1].RunID != cleanupRunID {
		t.Fatalf("finishes %+v (reports %+v), want R0 finished done with its deletions, then this run", fin, reports)
	}
	if c.count("CleanupBegin") != 2 || c.first("CleanupFinish") > c.last("CleanupBegin") {
		t.Fatalf("steps %v, want R0 finished before beginning again", c.names())
	}
}

func TestCleanupDecision_OrphanedMarkRun_AbortedWithoutSweeping(t *testing.T) {
	s := threeTables()
	s.begins = []activities.CleanupBeginResult{{Orphan: &activities.CleanupOrphan{RunID: "R0", Mode: "mark", WorkflowID: "wf0"}}, {}}
	res, c := runCleanup(t, cleanupIn(workflows.CleanupModeMark), s)
	if res.Outcome != outcome.Done || !reflect.DeepEqual(res.Adopted, []string{"R0"}) {
		t.Fatalf("result %+v, want done after aborting R0", res)
	}
	c.never("CleanupSweep")
	fin, _ := c.finishes()
	if len(fin) != 2 || fin[0].RunID != "R0" || !fin[0].Aborted || !strings.Contains(fin[0].Message, "aborted") {
		t.Fatalf("finishes %+v, want R0 aborted first", fin)
	}
	for _, in := range inputsOf[activities.CleanupSummarizeInput](c.decisionEnv, "CleanupSummarize") {
		if in.RunID == "R0" {
			t.Fatalf("summarised the aborted mark run R0")
		}
	}
}

func TestCleanupDecision_OrphanStillRunningAfterItsFinish_ConflictNotALoop(t *testing.T) {
	orphan := &activities.CleanupOrphan{RunID: "R0", Mode: "mark", WorkflowID: "wf0"}
	s := cleanupScript{begins: []activities.CleanupBeginResult{{Orphan: orphan}, {Orphan: orphan}}}
	res, c := runCleanup(t, cleanupIn(workflows.CleanupModeMark), s)
	if res.Outcome != outcome.Conflict || res.ActiveRunID != "R0" || !strings.Contains(res.Message, "still running") {
		t.Fatalf("result %+v, want conflict naming R0", res)
	}
	if c.count("CleanupBegin") != 2 || c.count("CleanupFinish") != 1 {
		t.Fatalf("steps %v, want R0 finished once and no third begin", c.names())
	}
	c.never("CleanupMarkTrees")
}

func TestCleanupDecision_TableMarkFails_RunFinishedFailedAndNothingSwept(t *testing.T) {
	s := threeTables()
	delete(s.tables, "b") // b's mark fails
	c, err := runCleanupErr(t, cleanupIn(workflows.CleanupModeSweep), s)
	if err == nil || !strings.Contains(err.Error(), "table b") {
		t.Fatalf("err %v, want the mark of table b to fail the run", err)
	}
	c.never("CleanupSweep", "CleanupSummarize")
	fin, reports := c.finishes()
	if len(fin) != 1 || !fin[0].Failed || fin[0].RunID != cleanupRunID || !strings.Contains(fin[0].Message, "table b") || reports[0].Message != fin[0].Message {
		t.Fatalf("finishes %+v, want the run finished failed naming table b", fin)
	}
	if len(c.tableInputs) != 3 {
		t.Fatalf("%d table marks, want every table started before the failure was seen", len(c.tableInputs))
	}
}

func TestCleanupDecision_RunNoLongerRunning_SweepNotRetriedAndRunFailed(t *testing.T) {
	s := threeTables()
	s.sweepErr = temporal.NewApplicationError("run was finished by another workflow", "CleanupRunNotRunning")
	c, err := runCleanupErr(t, cleanupIn(workflows.CleanupModeSweep), s)
	if err == nil || !strings.Contains(err.Error(), "sweep commits") {
		t.Fatalf("err %v, want the commit sweep's failure", err)
	}
	if c.count("CleanupSweep") != 1 {
		t.Fatalf("sweep ran %d times, want once: CleanupRunNotRunning is not retried", c.count("CleanupSweep"))
	}
	fin, _ := c.finishes()
	if len(fin) != 1 || !fin[0].Failed {
		t.Fatalf("finishes %+v, want the run finished failed", fin)
	}
	c.never("CleanupSummarize")
}

func TestCleanupDecision_ActivitiesPerRunReached_ContinuesAsNewCarryingTheSweep(t *testing.T) {
	s := threeTables()
	s.sweeps = map[string][]activities.CleanupSweepProgress{
		sweepKey(cleanupRunID, "g/trees/", "commit"): {{After: "k1", Deleted: 1}, {After: "k2", Deleted: 2}},
	}
	in := cleanupIn(workflows.CleanupModeSweep)
	in.Tuning = &workflows.CleanupTuning{ActivitiesPerRun: 2}
	c, err := runCleanupErr(t, in, s)
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("err %v, want continue-as-new", err)
	}
	var next workflows.CleanupInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatalf("decode next input: %v", err)
	}
	r := next.Resume
	if next.RunID != cleanupRunID || r == nil || !r.CommitsPending || r.CommitsAfter != "k2" || r.Progress.Deleted != 3 ||
		r.Result.Sweep.ContinuedAsNew != 1 || r.Result.Sweep.Activities != 2 {
		t.Fatalf("next input %+v (resume %+v), want the commit sweep to resume after k2 under the same run", next, r)
	}
	wantLanes := []workflows.CleanupLane{{Table: "a", Versions: true, Objects: true}, {Table: "b", Objects: true}}
	if lanes := r.Lanes; !reflect.DeepEqual(sortedLanes(lanes), wantLanes) {
		t.Fatalf("lanes %+v, want %+v", lanes, wantLanes)
	}
	c.never("CleanupSummarize", "CleanupFinish")
}

func TestCleanupDecision_Resume_SweepsWhatIsLeftWithoutMarkingAgain(t *testing.T) {
	ao := format.TableObjectsPrefix("g", "a")
	s := cleanupScript{
		sweeps: map[string][]activities.CleanupSweepProgress{
			sweepKey(cleanupRunID, "g/trees/", "commit"): {{After: "k5", Deleted: 2, Done: true}},
			sweepKey(cleanupRunID, ao, ""):               {{After: "o9", Deleted: 4, Done: true}},
		},
		summaries: map[string]activities.CleanupSummary{cleanupRunID: {Deleted: workflows.CleanupCounts{Commits: 5, Objects: 6}}},
	}
	in := cleanupIn(workflows.CleanupModeSweep)
	in.Resume = &workflows.CleanupResume{
		Result:   workflows.CleanupResult{RunID: cleanupRunID, Graph: "g", Mode: workflows.CleanupModeSweep, Sweep: workflows.CleanupSweepStats{Activities: 200, ContinuedAsNew: 1}},
		Progress: workflows.CleanupProgress{RunID: cleanupRunID, Deleted: 5}, CommitsPending: true, CommitsAfter: "k3",
		Lanes: []workflows.CleanupLane{{Table: "a", Objects: true, After: "o5"}},
	}
	res, c := runCleanup(t, in, s)
	if res.Outcome != outcome.Done || res.RunID != cleanupRunID || res.Sweep.Activities != 202 || res.Sweep.ContinuedAsNew != 1 || res.Deleted.Keys() != 11 {
		t.Fatalf("result %+v, want done counting both executions' sweeps", res)
	}
	want := []string{sweepKey(cleanupRunID, "g/trees/", "commit") + " after k3", sweepKey(cleanupRunID, ao, "") + " after o5"}
	if got := c.sweepKeys(); !reflect.DeepEqual(got, want) {
		t.Fatalf("sweeps %v, want %v", got, want)
	}
	c.never("CleanupBegin", "CleanupMarkTrees", "CleanupMarkTable")
}

func TestCleanupDecision_Parallelism_BoundsTablesMarkedAtOnce(t *testing.T) {
	s := threeTables()
	s.trees.Tables = nil
	for i := range 6 {
		name := fmt.Sprintf("t%d", i)
		s.trees.Tables = append(s.trees.Tables, name)
		s.tables[name] = activities.CleanupMarkTableResult{Kept: workflows.CleanupKept{Referenced: 1}}
	}
	s.markDelay = 50 * time.Millisecond
	in := cleanupIn(workflows.CleanupModeMark)
	in.Tuning = &workflows.CleanupTuning{Parallelism: 2}
	res, c := runCleanup(t, in, s)
	if res.Outcome != outcome.Done || res.Kept.Referenced != 6 || len(c.tableInputs) != 6 {
		t.Fatalf("result %+v after %d table marks, want all 6 tables decided", res, len(c.tableInputs))
	}
	if c.maxConcurrent != 2 {
		t.Fatalf("%d tables marked at once, want 2 (the limit, reached)", c.maxConcurrent)
	}
}

func TestCleanupDecision_PlanKeys_CappedAtMaxPlanKeys(t *testing.T) {
	s := threeTables()
	s.trees.PlanKeys = []string{"k1", "k2"}
	s.tables["a"] = activities.CleanupMarkTableResult{PlanKeys: []string{"k3", "k4"}, Condemned: workflows.CleanupCounts{Versions: 2}}
	in := cleanupIn(workflows.CleanupModeDryRun)
	in.Tuning = &workflows.CleanupTuning{MaxPlanKeys: 3}
	res, c := runCleanup(t, in, s)
	if len(res.PlanKeys) != 3 || res.PlanKeys[0] != "k1" || res.PlanKeys[1] != "k2" || res.PlanKeyCount != 8 {
		t.Fatalf("plan keys %v (count %d), want 3 listed of 8 condemned", res.PlanKeys, res.PlanKeyCount)
	}
	if c.treeInputs[0].MaxPlanKeys != 3 || c.tableInputs[0].MaxPlanKeys != 3 {
		t.Fatalf("the cap was not passed to the marks")
	}
}

// runCleanupErr runs a Cleanup expected to end with an error, and returns it.
func runCleanupErr(t *testing.T, in workflows.CleanupInput, s cleanupScript) (*cleanupEnv, error) {
	t.Helper()
	c := newCleanupEnv(t, s)
	c.env.ExecuteWorkflow(workflows.CleanupName, in)
	if !c.env.IsWorkflowCompleted() {
		t.Fatalf("workflow did not complete")
	}
	return c, c.env.GetWorkflowError()
}

func sortedLanes(l []workflows.CleanupLane) []workflows.CleanupLane {
	out := slices.Clone(l)
	slices.SortFunc(out, func(x, y workflows.CleanupLane) int { return strings.Compare(x.Table, y.Table) })
	return out
}
