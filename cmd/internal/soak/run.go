package soak

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/internal/oracle"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/worker"
	"github.com/graftworks/graft/workflows"
	"github.com/graftworks/graft/workflows/contract"
)

// Result is what one schedule did and what the oracle found.
type Result struct {
	Seed    uint64
	Backend Backend
	Graph   string
	// Violations are broken promises.
	Violations []oracle.Violation
	Counts
	// Err is an infrastructure failure (the stack did not answer): no verdict.
	Err error
}

// Counts tally what schedules did: Ops the ops run by kind; Outcomes by "kind:outcome";
// Faults the faults injected, storage ones by mode (and status) as the fault store
// recorded them; Unclassified, by "kind: message shape", the client errors outcomeOf
// calls "error", so a soak shows what they were, not just how many.
type Counts struct{ Ops, Outcomes, Faults, Unclassified map[string]int }

func newCounts() Counts {
	return Counts{map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}}
}

func (c Counts) add(o Counts) {
	pairs := [][2]map[string]int{{c.Ops, o.Ops}, {c.Outcomes, o.Outcomes}, {c.Faults, o.Faults},
		{c.Unclassified, o.Unclassified}}
	for _, m := range pairs {
		for k, v := range m[1] {
			m[0][k] += v
		}
	}
}

// Failed reports whether the schedule broke a promise or could not be judged.
func (r Result) Failed() bool { return len(r.Violations) > 0 || r.Err != nil }

// opTimeout bounds one client call; quiesceTimeout bounds waiting for every workflow of
// a schedule to close once its faults are gone.
const (
	opTimeout      = 90 * time.Second
	quiesceTimeout = 3 * time.Minute
)

type runner struct {
	st    *Stack
	s     Schedule
	ctx   context.Context
	graph string
	tq    string
	fs    *faults.Store
	gc    *client.Client
	root  string // main's root commit

	mu       sync.Mutex
	res      *Result
	keys     map[string]string // op id → idempotency key
	wids     map[string]bool   // every workflow id an op may have started
	victims  map[string]string // op id → workflow id
	reported []oracle.ReportedCommit
	immut    map[string][32]byte // immutable key → sha256 of its bytes when reported
	lastMark string
	removes  []func()
	holdLate map[string]bool // rule names whose held puts are released late
	operated map[string]bool // workflow ids an operator cancelled or terminated
}

// Run runs schedule s on the stack and checks the result.
func (st *Stack) Run(ctx context.Context, s Schedule) Result {
	graphName := fmt.Sprintf("s%d-%s-%s", s.Seed, string(s.Backend)[:2], nonce(3))
	res := &Result{Seed: s.Seed, Backend: s.Backend, Graph: graphName, Counts: newCounts()}
	r := &runner{st: st, s: s, ctx: ctx, graph: graphName, tq: "soak-" + graphName, fs: faults.Wrap(st.Inner), res: res,
		keys: map[string]string{}, wids: map[string]bool{}, victims: map[string]string{}, immut: map[string][32]byte{}, holdLate: map[string]bool{}, operated: map[string]bool{}}
	r.gc = client.New(st.TC, client.Options{TaskQueue: r.tq, PollInterval: 100 * time.Millisecond})
	if err := r.run(); err != nil {
		res.Err = err
	}
	return *res
}

func (r *runner) violate(rule, f string, args ...any) {
	r.record(oracle.Violation{Rule: rule, Detail: fmt.Sprintf(f, args...)})
}

// record files the oracle's violations as broken promises.
func (r *runner) record(vs ...oracle.Violation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Violations = append(r.res.Violations, vs...)
}

// violateUnlessDown files a violation of rule, unless err — the error of the call
// that checked it — is the stack not answering: then the check had no answer to
// judge, and the schedule is unjudged rather than violated.
func (r *runner) violateUnlessDown(err error, rule, f string, args ...any) {
	if stackDown(err) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.res.Err == nil {
			r.res.Err = fmt.Errorf("check %s: the stack did not answer: %w", rule, err)
		}
		return
	}
	r.violate(rule, f, args...)
}

// stackDown reports whether err says Temporal did not answer: its frontend
// unreachable or unavailable, a start left unanswered, or its namespace not served
// (a dev server that has just restarted answers "Namespace default is not found"
// until its caches are filled again).
func stackDown(err error) bool {
	if err == nil {
		return false
	}
	var nsNotFound *serviceerror.NamespaceNotFound
	var unavailable *serviceerror.Unavailable
	var unanswered *client.UnansweredError
	if errors.As(err, &nsNotFound) || errors.As(err, &unavailable) || errors.As(err, &unanswered) {
		return true
	}
	m := err.Error()
	return namespaceNotFound.MatchString(m) || strings.Contains(m, "connection refused")
}

var namespaceNotFound = regexp.MustCompile(`[Nn]amespace \S+ is not found`)

func (r *runner) count(m map[string]int, k string) {
	r.mu.Lock()
	m[k]++
	r.mu.Unlock()
}

func (r *runner) run() error {
	var procFault *Fault
	for i := range r.s.Faults {
		if r.s.Faults[i].Class == ClassProcess {
			procFault = &r.s.Faults[i]
		}
	}
	// Workers: in-process on the schedule's own fault store; a child process (no faults)
	// when the schedule kills one.
	var child *exec.Cmd
	stopWorker := func() {}
	startInProcess := func() error {
		stop, err := r.st.startWorker(r.tq, r.fs, func(error) { r.count(r.res.Faults, "process:worker_fatal_replaced") })
		if err != nil {
			return err
		}
		stopWorker = stop
		return nil
	}
	defer func() {
		if child != nil {
			child.Process.Kill()
		}
	}()
	defer func() { stopWorker() }()
	// The workers start inside the setup's share of the stack (no restart in between):
	// a worker that waited out a restart before its first poll answered could meet the
	// new server's "namespace not found" after two minutes of failed polls, and the SDK
	// stops such a worker.
	err := func() error {
		r.st.quiesce.RLock()
		defer r.st.quiesce.RUnlock()
		if procFault != nil && strings.HasPrefix(procFault.Kind, "kill_worker") {
			c, err := r.st.startChild(r.tq)
			if err != nil {
				return fmt.Errorf("start child worker: %w", err)
			}
			child = c
		}
		if procFault == nil || procFault.Kind != "kill_worker_alone" {
			if err := startInProcess(); err != nil {
				return err
			}
		}
		return r.setup()
	}()
	if err != nil {
		return err
	}

	// The concurrent phase: every op and fault at its offset.
	var wg sync.WaitGroup
	for _, o := range r.s.Ops {
		wg.Go(func() {
			sleep(r.ctx, o.At)
			r.runOp(o)
		})
	}
	for _, f := range r.s.Faults {
		wg.Go(func() {
			sleep(r.ctx, f.At)
			switch f.Class {
			case ClassStorage:
				r.addStorageFault(f)
			case ClassOperator:
				r.operator(f)
			case ClassProcess:
				switch f.Kind {
				case "pg_terminate":
					if n, err := r.st.TerminateBackends(r.ctx); err == nil && n > 0 {
						r.count(r.res.Faults, "process:pg_terminate")
					}
				default:
					if child != nil {
						child.Process.Kill() // kill -9
						r.count(r.res.Faults, "process:"+f.Kind)
					}
					if f.Kind == "kill_worker_alone" {
						if err := startInProcess(); err != nil {
							r.violate("soak-infrastructure", "start worker after the kill: %v", err)
						}
					}
				}
			}
		})
	}
	wg.Wait()

	// Quiescence: faults off, held puts released (late) or discarded, every workflow
	// closed, the reconciler run.
	r.st.quiesce.RLock()
	defer r.st.quiesce.RUnlock()
	r.mu.Lock()
	removes := r.removes
	r.mu.Unlock()
	for _, rm := range removes {
		rm()
	}
	r.recordStorageFaults()
	for _, h := range r.fs.Held() {
		if r.holdLate[h.Rule()] {
			h.Release(r.ctx)
		} else {
			h.Drop()
		}
	}
	if err := r.waitClosed(); err != nil {
		return err
	}
	// A step of a closed workflow may still run (a stalled read) and record an operation
	// after the reconciler looked: the worker stops once its steps returned, and a fresh
	// one runs what follows.
	stopWorker()
	if err := startInProcess(); err != nil {
		return err
	}
	if err := r.reconcile(); err != nil {
		return err
	}
	r.nextCleanup()
	r.namesAgain()
	if err := r.waitClosed(); err != nil {
		return err
	}
	stopWorker()
	stopWorker = func() {}
	return r.check()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// setup initialises the graph (faulted when the schedule says so: a re-run under the
// same id must then adopt what the first run wrote) and writes table t on main.
func (r *runner) setup() error {
	ctx, cancel := context.WithTimeout(r.ctx, opTimeout)
	defer cancel()
	key := ulid.Make().String()
	r.count(r.res.Ops, string(OpInit))
	if r.s.InitFaulted {
		rr := rand.New(rand.NewPCG(r.s.Seed, 7))
		rule := faults.Rule{Name: "init", Op: faults.OpPut, Times: 1,
			KeyPrefix: format.GraphKey(r.graph), Mode: faults.Refuse, Status: 403}
		switch rr.IntN(3) {
		case 0:
			rule.Mode, rule.Status = faults.ApplyLoseAnswer, 0
		case 1:
			rule.KeyPrefix = format.BranchRefsPrefix(r.graph)
		}
		remove := r.fs.Add(rule)
		res, err := r.gc.InitGraph(ctx, client.InitGraphRequest{Graph: r.graph, IdempotencyKey: key})
		remove()
		r.count(r.res.Outcomes, "init:"+outcomeOf(string(res.Outcome), err))
	}
	res, err := r.gc.InitGraph(ctx, client.InitGraphRequest{Graph: r.graph, IdempotencyKey: key})
	if err != nil || res.Outcome != outcome.Done {
		if r.s.InitFaulted {
			r.violateUnlessDown(err, "init-rerun-adopts", "init re-run under its id after a faulted first run: %s, %v", res.Outcome, err)
			return nil
		}
		return fmt.Errorf("init %s: %s, %w", r.graph, res.Outcome, err)
	}
	r.count(r.res.Outcomes, "init:done")
	r.root = res.Root
	r.wids[client.InitGraphWorkflowID(r.graph)] = true
	if err := r.setupWrite(ctx, "main", "t"); err != nil {
		return err
	}
	for _, b := range r.s.Setup {
		r.wids[client.CreateBranchWorkflowID(r.graph, b)] = true
		res, err := r.gc.CreateBranch(ctx, client.CreateBranchRequest{Graph: r.graph, Branch: b})
		if err != nil || res.Outcome != outcome.Created {
			return fmt.Errorf("setup create %s: %s, %w", b, res.Outcome, err)
		}
		if err := r.setupWrite(ctx, b, "u"); err != nil {
			return err
		}
	}
	if r.s.SetupTag != "" {
		r.wids[client.CreateTagWorkflowID(r.graph, r.s.SetupTag)] = true
		res, err := r.gc.CreateTag(ctx, client.CreateTagRequest{Graph: r.graph, Name: r.s.SetupTag})
		if err != nil || res.Outcome != outcome.Created {
			return fmt.Errorf("setup tag %s: %s, %w", r.s.SetupTag, res.Outcome, err)
		}
	}
	return nil
}

func (r *runner) setupWrite(ctx context.Context, branch, table string) error {
	files, remove := r.dataFiles(1, "setup-"+branch)
	defer remove()
	w, err := r.gc.WriteTable(ctx, r.fs, client.WriteTableRequest{Graph: r.graph, Branch: branch, Table: table, Files: files})
	if err != nil || w.Outcome != outcome.Done {
		return fmt.Errorf("setup write on %s: %s, %w", branch, w.Outcome, err)
	}
	r.noteCommit(branch, w.Commit)
	return nil
}

// dataFiles writes n one-row CSV files for a write; remove deletes them. A file that
// cannot be written fails the write that reads it.
func (r *runner) dataFiles(n int, body string) (files []string, remove func()) {
	for i := range n {
		f := filepath.Join(r.st.cfg.Dir, "data-"+ulid.Make().String()+".csv")
		os.WriteFile(f, fmt.Appendf(nil, "id,v\n%d,%s\n", i, body), 0o644)
		files = append(files, f)
	}
	return files, func() {
		for _, f := range files {
			os.Remove(f)
		}
	}
}

// noteCommit records a commit an op reported: it must stay on its branch (unless the
// schedule deletes, repairs or re-creates the branch) and its bytes never change.
func (r *runner) noteCommit(branch, commit string) {
	if commit == "" {
		return
	}
	id, err := format.ParseCommitID(commit)
	if err != nil {
		r.violate("reported-commit", "%s reported on %s: %v", commit, branch, err)
		return
	}
	key := format.CommitIDKey(r.graph, id)
	obj, err := r.st.Inner.Get(r.ctx, key)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reported = append(r.reported, oracle.ReportedCommit{Branch: branch, Commit: commit})
	if err == nil {
		r.immut[key] = sha256.Sum256(obj.Body)
	}
}

func (r *runner) key(o Op) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.keys[o.SameIDAs] // no op has the id ""
	if !ok {
		k = ulid.Make().String()
	}
	r.keys[o.ID] = k
	return k
}

func (r *runner) started(o Op, wid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wids[wid] = true
	r.victims[o.ID] = wid
}

// headOf returns branch's head commit id now, or main's root when it has none.
func (r *runner) headOf(branch string) string {
	g, err := graph.Open(r.st.Inner, r.graph)
	if err != nil {
		return r.root
	}
	h, err := g.BranchHead(r.ctx, branch)
	if err != nil {
		return r.root
	}
	return h.Commit.ID.String()
}

func (r *runner) source(src string) (fromBranch, fromCommit, fromTag string) {
	switch {
	case strings.HasPrefix(src, "branch:"):
		return strings.TrimPrefix(src, "branch:"), "", ""
	case src == "commit:root":
		return "", r.root, ""
	case strings.HasPrefix(src, "commit:head:"):
		return "", r.headOf(strings.TrimPrefix(src, "commit:head:")), ""
	case strings.HasPrefix(src, "tag:"):
		return "", "", strings.TrimPrefix(src, "tag:")
	}
	return "", "", ""
}

func (r *runner) runOp(o Op) {
	ctx, cancel := context.WithTimeout(r.ctx, opTimeout)
	defer cancel()
	r.count(r.res.Ops, o.label())
	key := r.key(o)
	var (
		oc     outcome.Outcome
		commit string // a commit the op reported on o.Branch
		err    error
	)
	switch o.Kind {
	case OpWrite:
		files, remove := r.dataFiles(max(o.Files, 1), o.ID)
		defer remove()
		wid := client.WriteTableWorkflowID(r.graph, o.Branch, key)
		r.started(o, wid)
		req := client.WriteTableRequest{Graph: r.graph, Branch: o.Branch, Table: o.Table, Files: files,
			Append: o.Append, IdempotencyKey: key}
		if o.DiesMidUpload {
			// The client hangs after its first object is stored, past the write's deadline;
			// a client that gives up first ends the write abandoned, and an operator's
			// cancel of the waiting write would too.
			r.mu.Lock()
			r.operated[wid] = true
			r.mu.Unlock()
			req.UploadDeadline = time.Second
			dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
			defer dcancel()
			// (A write attached to under a reused key uploads nothing, and ends as it ends.)
			res, e := r.gc.WriteTable(dctx, &hangingStore{Store: r.fs, prefix: r.graph + "/tables/"}, req)
			oc, commit, err = res.Outcome, res.Commit, e
			if errors.Is(e, context.DeadlineExceeded) {
				oc, err = outcome.Abandoned, nil
			}
			break
		}
		res, e := r.gc.WriteTable(ctx, r.fs, req)
		oc, commit, err = res.Outcome, res.Commit, e
	case OpCreate:
		fb, fc, ft := r.source(o.Source)
		r.started(o, client.CreateBranchWorkflowID(r.graph, o.Branch))
		res, e := r.gc.CreateBranch(ctx, client.CreateBranchRequest{Graph: r.graph, Branch: o.Branch, FromBranch: fb, FromCommit: fc, FromTag: ft, IdempotencyKey: key})
		oc, err = res.Outcome, e
	case OpMerge:
		src := strings.TrimPrefix(o.Source, "branch:")
		wid := client.MergeWorkflowID(r.graph, o.Branch, key)
		r.started(o, wid)
		req := client.MergeRequest{Graph: r.graph, Source: src, Target: o.Branch, IdempotencyKey: key, WaitTimeout: opTimeout / 2}
		if o.Review != "" {
			if _, e := r.st.Oracle.BranchRuleSet(ctx, catalog.BranchRule{Graph: r.graph, Branch: o.Branch, Approvals: 1, SetBy: "soak"}); e != nil {
				err = fmt.Errorf("protect %s: %w", o.Branch, e)
				break
			}
			if o.Review == "deadline" {
				req.WaitTimeout = time.Second
			}
		}
		go r.review(ctx, key, wid, o.Review)
		res, e := r.gc.Merge(ctx, req)
		oc, commit, err = res.Outcome, res.Commit, e
	case OpRestore:
		_, fc, ft := r.source(o.Source)
		r.started(o, client.RestoreWorkflowID(r.graph, o.Branch, key))
		res, e := r.gc.Restore(ctx, client.RestoreRequest{Graph: r.graph, Branch: o.Branch, ToCommit: fc, ToTag: ft, IdempotencyKey: key})
		oc, commit, err = res.Outcome, res.Commit, e
	case OpTagCreate:
		r.started(o, client.CreateTagWorkflowID(r.graph, o.Tag))
		res, e := r.gc.CreateTag(ctx, client.CreateTagRequest{Graph: r.graph, Name: o.Tag, Branch: o.Branch, IdempotencyKey: key})
		oc, err = res.Outcome, e
	case OpTagDelete:
		r.started(o, client.DeleteTagWorkflowID(r.graph, o.Tag))
		res, e := r.gc.DeleteTag(ctx, client.DeleteTagRequest{Graph: r.graph, Name: o.Tag, IdempotencyKey: key})
		oc, err = res.Outcome, e
	case OpBranchDelete:
		r.started(o, client.DeleteBranchWorkflowID(r.graph, o.Branch))
		res, e := r.gc.DeleteBranch(ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: o.Branch, Force: r.s.Seed%2 == 0, IdempotencyKey: key})
		oc, err = res.Outcome, e
	case OpRepair:
		keep := format.NativeName(o.Branch, ulid.Make())
		var natives []string
		for _, ref := range liveRefs(r.ctx, r.st.Inner, format.BranchRefPrefix(r.graph, o.Branch)) {
			if ref.Branch == o.Branch {
				natives = append(natives, ref.Native)
			}
		}
		if len(natives) > 0 {
			keep = slices.Min(natives)
		}
		r.started(o, client.RepairBranchWorkflowID(r.graph, o.Branch))
		res, e := r.gc.RepairBranch(ctx, client.RepairBranchRequest{Graph: r.graph, Branch: o.Branch, Keep: keep, IdempotencyKey: key})
		oc, err = res.Outcome, e
	case OpAbandon:
		r.started(o, client.CreateBranchWorkflowID(r.graph, o.Branch))
		oc, err = "done", r.gc.AbandonCreate(ctx, r.graph, o.Branch, "soak")
	case OpCleanup:
		req := client.CleanupRequest{Graph: r.graph, KeepNewest: o.KeepNewest, KeepNewerThan: o.KeepNewerThan, RunID: key}
		if o.NoGuard {
			zero := time.Duration(0)
			req.GuardWindow = &zero
		}
		req.Mode = cmp.Or(map[string]workflows.CleanupMode{"dry_run": workflows.CleanupModeDryRun,
			"mark": workflows.CleanupModeMark}[o.Mode], workflows.CleanupModeSweep)
		if o.Mode == "sweep_run" {
			r.mu.Lock()
			req.SweepRunID = r.lastMark
			r.mu.Unlock()
			if req.SweepRunID != "" {
				req.Mode = "" // sweep the last mark's plan
			}
		}
		r.started(o, client.CleanupWorkflowID(r.graph))
		res, e := r.gc.Cleanup(ctx, req)
		oc, err = res.Outcome, e
		if e == nil && o.Mode == "mark" && res.Outcome == outcome.Done {
			r.mu.Lock()
			r.lastMark = res.RunID
			r.mu.Unlock()
		}
	}
	// Every outcome that lands a commit on o.Branch; the others report none.
	if err == nil && (oc == outcome.Done || oc == outcome.Merged || oc == outcome.Adopted) {
		r.noteCommit(o.Branch, commit)
	}
	out := outcomeOf(string(oc), err)
	r.count(r.res.Outcomes, o.label()+":"+out)
	if out == "error" {
		r.count(r.res.Unclassified, o.label()+": "+errorShape(err, r.graph))
	}
}

// review ends the wait of merge key (workflow wid) once it waits: approve (also for a
// merge without a review of its own, into a target another merge protected), reject,
// or nothing ("deadline"). It gives up when the merge ends or ctx does.
func (r *runner) review(ctx context.Context, key, wid, verdict string) {
	if verdict == "deadline" {
		return
	}
	for ; ctx.Err() == nil; sleep(ctx, 100*time.Millisecond) {
		op, err := r.st.Oracle.OperationGet(ctx, catalog.OperationGetParams{ID: key})
		switch {
		case errors.Is(err, catalog.ErrNotFound) || err == nil && op.Phase != "waiting" && op.State != catalog.OperationDone:
			continue
		case err != nil || op.State == catalog.OperationDone:
			return
		}
		rv := contract.Review{Reviewer: "soak", Approve: verdict != "reject", Comment: "soak " + cmp.Or(verdict, "approve")}
		h, err := r.st.TC.UpdateWorkflow(ctx, sdkclient.UpdateWorkflowOptions{WorkflowID: wid,
			UpdateName: workflows.ReviewUpdateName, WaitForStage: sdkclient.WorkflowUpdateStageCompleted, Args: []any{rv}})
		if err == nil && h.Get(ctx, nil) == nil {
			return
		}
	}
}

// hangingStore is a dying client's store: a put of a data object is stored, then never
// answered until the client gives up.
type hangingStore struct {
	storage.Store
	prefix string
}

func (h *hangingStore) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	res, err := h.Store.Put(ctx, key, body, opts)
	if err != nil || !strings.HasPrefix(key, h.prefix) || !strings.Contains(key, "/objects/") {
		return res, err
	}
	<-ctx.Done()
	return res, ctx.Err()
}

// errorShape is err's message with what differs between seeds (the graph's name, ids,
// numbers) replaced, cut to one line of 200 bytes, so like errors count together.
func errorShape(err error, graph string) string {
	m := strings.ReplaceAll(err.Error(), graph, "<graph>")
	m = ulidLike.ReplaceAllString(m, "<id>")
	m = digits.ReplaceAllString(m, "N")
	if i := strings.IndexByte(m, '\n'); i >= 0 {
		m = m[:i]
	}
	if len(m) > 200 {
		m = m[:200] + "…"
	}
	return m
}

var (
	ulidLike = regexp.MustCompile(`[0-9A-HJKMNP-TV-Z]{26}`)
	digits   = regexp.MustCompile(`[0-9]+`)
)

// outcomeOf names how a client call ended: its outcome, or the kind of error.
func outcomeOf(o string, err error) string {
	if err == nil {
		return o
	}
	if oc, ok := outcome.Of(err); ok {
		return string(oc)
	}
	var canceled *temporal.CanceledError
	var terminated *temporal.TerminatedError
	var wfe *client.WorkflowError
	var ua *client.UnansweredError
	switch {
	case errors.As(err, &canceled):
		return "canceled"
	case errors.As(err, &terminated), strings.Contains(err.Error(), "terminated"):
		return "terminated"
	case errors.As(err, &ua):
		return "unanswered" // Temporal did not answer the start (a server restart): it may have started
	case errors.As(err, &wfe) && wfe.Status == "failed":
		return "failed" // the ledger's failed: a step before any effect kept failing
	case errors.Is(err, context.DeadlineExceeded):
		return "client_timeout"
	case errors.Is(err, storage.ErrAmbiguous), errors.Is(err, storage.ErrUnavailable), errors.Is(err, storage.ErrRefused),
		errors.Is(err, storage.ErrPreconditionFailed), strings.Contains(err.Error(), "injected"):
		return "client_storage_error"
	case strings.Contains(err.Error(), "canceled"):
		return "canceled"
	}
	return "error"
}

// liveRefs returns the live branch refs under prefix that read back.
func liveRefs(ctx context.Context, s storage.Store, prefix string) []format.BranchRef {
	var out []format.BranchRef
	storage.ListAll(ctx, s, prefix, func(o storage.ObjectInfo) error {
		obj, err := s.Get(ctx, o.Key)
		if err != nil {
			return nil
		}
		if ref, err := format.DecodeBranchRef(obj.Body); err == nil && ref.State == format.RefLive {
			out = append(out, ref)
		}
		return nil
	})
	return out
}

// addStorageFault adds f's rule to the schedule's fault store.
func (r *runner) addStorageFault(f Fault) {
	g := r.graph
	rule := storageFaults[f.Kind]
	rule.Name, rule.Op, rule.Skip, rule.Times = f.ID, f.Op, f.Skip, f.Times
	rule.KeyPrefix = cmp.Or(map[string]string{"refs": format.BranchRefsPrefix(g), "tags": format.TagsPrefix(g), "commits": g + "/trees/",
		"tables": g + "/tables/", "graph": format.GraphKey(g)}[f.Target], format.GraphPrefix(g))
	rm := r.fs.Add(rule)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holdLate[f.ID] = f.Kind == "hold_late"
	r.removes = append(r.removes, rm)
}

// storageFaults are the rules of the storage fault kinds.
var storageFaults = map[string]faults.Rule{
	"lose_answer":      {Mode: faults.ApplyLoseAnswer},
	"fail_before_send": {Mode: faults.FailBeforeSend},
	"hold_late":        {Mode: faults.Hold},
	"hold_never":       {Mode: faults.Hold},
	"refuse_412":       {Mode: faults.Refuse, Status: 412},
	"refuse_403":       {Mode: faults.Refuse, Status: 403},
	"refuse_503":       {Mode: faults.Refuse, Status: 503},
	"delay":            {Mode: faults.Delay, Delay: 200 * time.Millisecond},
	"stall":            {Mode: faults.Delay, Delay: StallFor},
}

// recordStorageFaults counts the faults the store injected, by mode and status.
func (r *runner) recordStorageFaults() {
	for _, q := range r.fs.Requests() {
		if q.Fault == faults.None {
			continue
		}
		k := "storage:" + q.Fault.String()
		if q.Fault == faults.Refuse {
			k += fmt.Sprintf("_%d", q.Status)
		}
		if q.Fault == faults.Delay && slices.ContainsFunc(r.s.Faults, func(f Fault) bool { return f.ID == q.Rule && f.Kind == "stall" }) {
			k = "storage:stall"
		}
		r.count(r.res.Faults, k)
	}
}

// operator cancels, terminates or resets the victim's workflow.
func (r *runner) operator(f Fault) {
	r.mu.Lock()
	wid := r.victims[f.Victim]
	r.mu.Unlock()
	if wid == "" {
		return
	}
	var err error
	switch f.Kind {
	case "cancel":
		err = r.st.TC.CancelWorkflow(r.ctx, wid, "")
	case "terminate":
		err = r.st.TC.TerminateWorkflow(r.ctx, wid, "", "soak operator")
	case "reset":
		err = r.reset(wid)
	}
	if err == nil {
		r.count(r.res.Faults, "operator:"+f.Kind)
		if f.Kind != "reset" {
			r.mu.Lock()
			r.operated[wid] = true
			r.mu.Unlock()
		}
	}
}

// reset resets wid's current run to one of its completed workflow tasks, chosen by the
// seed.
func (r *runner) reset(wid string) error {
	it := r.st.TC.GetWorkflowHistory(r.ctx, wid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var points []int64
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return err
		}
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			points = append(points, ev.GetEventId())
		}
	}
	if len(points) == 0 {
		return errors.New("no workflow task to reset to")
	}
	d, err := r.st.TC.DescribeWorkflowExecution(r.ctx, wid, "")
	if err != nil {
		return err
	}
	at := points[int(r.s.Seed)%len(points)]
	_, err = r.st.TC.ResetWorkflowExecution(r.ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace:                 r.st.cfg.Namespace,
		WorkflowExecution:         d.GetWorkflowExecutionInfo().GetExecution(),
		Reason:                    "soak operator",
		WorkflowTaskFinishEventId: at,
		RequestId:                 ulid.Make().String(),
	})
	return err
}

// waitClosed waits until every workflow the schedule may have started has closed.
func (r *runner) waitClosed() error {
	ctx, cancel := context.WithTimeout(r.ctx, quiesceTimeout)
	defer cancel()
	r.mu.Lock()
	ids := slices.Sorted(maps.Keys(r.wids))
	r.mu.Unlock()
	for _, id := range ids {
		for {
			d, err := r.st.TC.DescribeWorkflowExecution(ctx, id, "")
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				break
			}
			if st := d.GetWorkflowExecutionInfo().GetStatus(); err == nil && st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				r.endedDefinitively(ctx, id, st)
				break
			}
			if ctx.Err() != nil {
				r.violate("every-op-ended", "workflow %s still running %s after the schedule's faults ended", id, quiesceTimeout)
				return nil
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// endedDefinitively checks how a closed workflow ended: completed, or failed with a
// definitive outcome (docs/outcomes.md: an ApplicationError whose type is the outcome);
// cancelled or terminated only when the schedule's operator did that to it.
func (r *runner) endedDefinitively(ctx context.Context, id string, st enumspb.WorkflowExecutionStatus) {
	switch st {
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		r.mu.Lock()
		ok := r.operated[id]
		r.mu.Unlock()
		if !ok {
			r.violate("op-ended-definitively", "workflow %s ended %s, and no operator did that", id, st)
		}
		return
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		err := r.st.TC.GetWorkflow(ctx, id, "").Get(ctx, nil)
		var app *temporal.ApplicationError
		if errors.As(err, &app) && outcome.Outcome(app.Type()).Valid() {
			return
		}
		// The ledger's failed (docs/outcomes.md, exit 1): a step before any storage
		// effect kept failing and the workflow recorded why. Definitive only when the
		// ledger has that workflow's operation done with that outcome and a reason; the
		// oracle then checks it left no pin, witness or pending write behind.
		if r.recordedFailed(ctx, id) {
			return
		}
		r.violateUnlessDown(err, "op-ended-definitively", "workflow %s failed without a definitive outcome (and the ledger does not record it failed): %v", id, err)
		return
	}
	r.violate("op-ended-definitively", "workflow %s ended %s", id, st)
}

// recordedFailed reports whether the ledger has the operation workflow id ran done with
// the ledger's failed outcome and the reason it gave up.
func (r *runner) recordedFailed(ctx context.Context, id string) bool {
	ops, err := r.st.Oracle.OperationList(ctx, catalog.OperationListParams{Graph: r.graph, Limit: 1000})
	if err != nil {
		return false
	}
	for _, op := range ops {
		if op.WorkflowID == id {
			return op.State == catalog.OperationDone && op.Outcome == catalog.OutcomeFailed && op.Error != ""
		}
	}
	return false
}

// reconcile runs the reconciler workflow (graft.Reconcile) over the schedule's graph.
func (r *runner) reconcile() error {
	ctx, cancel := context.WithTimeout(r.ctx, quiesceTimeout)
	defer cancel()
	run, err := r.st.TC.ExecuteWorkflow(ctx, sdkclient.StartWorkflowOptions{ID: "soak-reconcile/" + r.graph, TaskQueue: r.tq},
		workflows.ReconcileName, workflows.ReconcileInput{Graph: r.graph})
	if err != nil {
		return fmt.Errorf("start reconcile: %w", err)
	}
	var res workflows.ReconcileResult
	if err := run.Get(ctx, &res); err != nil {
		r.violateUnlessDown(err, "reconciler-ends", "graft.Reconcile over %s: %v", r.graph, err)
	}
	for _, s := range res.Settled {
		if s.Parked {
			r.violate("reconciler-settles", "operation %s (%s) still parked after the faults ended: %s", s.OpID, s.Kind, s.Message)
		}
	}
	return nil
}

// nextCleanup runs a mark-only cleanup (it deletes nothing) when the schedule ran
// cleanups: the reconciler leaves cleanup runs to the next mark or sweep, which finishes
// (or, for a mark or dry run, aborts) a run whose workflow ended without finishing it
// (docs/cleanup.md). A dry run does not look for such runs.
func (r *runner) nextCleanup() {
	if !slices.ContainsFunc(r.s.Ops, func(o Op) bool { return o.Kind == OpCleanup }) {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, opTimeout)
	defer cancel()
	res, err := r.gc.Cleanup(ctx, client.CleanupRequest{Graph: r.graph, KeepNewest: 1000, Mode: workflows.CleanupModeMark})
	if err != nil || res.Outcome != outcome.Done {
		r.violateUnlessDown(err, "next-cleanup-runs", "a mark-only cleanup after quiescence ended %s: %v", res.Outcome, err)
	}
}

// namesAgain creates every branch name the schedule used that is free now: each must be
// created (docs/outcomes.md: every name used can be created again). A name beside a live
// '/'-relative (a and a/b) is not free: live names are prefix-disjoint.
func (r *runner) namesAgain() {
	for _, b := range r.s.Branches {
		var live []string
		for _, ref := range liveRefs(r.ctx, r.st.Inner, format.BranchRefsPrefix(r.graph)) {
			live = append(live, ref.Branch)
		}
		if !disjoint(b, live) {
			continue
		}
		ctx, cancel := context.WithTimeout(r.ctx, opTimeout)
		r.mu.Lock()
		r.wids[client.CreateBranchWorkflowID(r.graph, b)] = true
		r.mu.Unlock()
		res, err := r.gc.CreateBranch(ctx, client.CreateBranchRequest{Graph: r.graph, Branch: b})
		cancel()
		if err != nil || res.Outcome != outcome.Created {
			r.violateUnlessDown(err, "name-reusable", "branch %s is free but creating it again ended %s: %v", b, res.Outcome, err)
		}
	}
}

// check runs the oracle, with the soak's own checks (internal/oracle/soak.go).
func (r *runner) check() error {
	r.mu.Lock()
	reported, immut, keys := r.reported, r.immut, r.keys
	r.mu.Unlock()
	moved := map[string]bool{}
	swept := false
	for _, o := range r.s.Ops {
		switch o.Kind {
		case OpBranchDelete, OpRepair:
			moved[o.Branch] = true
		case OpCleanup:
			swept = swept || o.Mode == "sweep" || o.Mode == "sweep_run"
		}
	}
	// A reported commit stays on its branch unless the schedule deleted or repaired the
	// branch; a sweep may reclaim it below the head (the oracle allows the gap).
	var keep []oracle.ReportedCommit
	for _, rc := range reported {
		if moved[rc.Branch] {
			continue
		}
		if id, err := format.ParseCommitID(rc.Commit); err == nil && swept {
			if _, err := r.st.Inner.Head(r.ctx, format.CommitIDKey(r.graph, id)); errors.Is(err, storage.ErrNotFound) {
				continue
			}
		}
		keep = append(keep, rc)
	}
	vs, err := oracle.Check(r.ctx, oracle.Config{Store: r.st.Inner, Catalog: r.st.Oracle, Graph: r.graph,
		Workflows: worker.TemporalWorkflows(r.st.TC), Names: append([]string{"main"}, r.s.Branches...), Reported: keep,
		Quiesced: true, Immutable: immut, OpIDs: slices.Collect(maps.Values(keys)), Reclaimed: swept})
	// What the oracle found before it could not go on is still found: a seed with a
	// violation is violated, whatever else stopped its check.
	r.record(vs...)
	if err != nil {
		return fmt.Errorf("oracle: %w", err)
	}
	return nil
}
