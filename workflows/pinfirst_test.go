package workflows_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	enumspb "go.temporal.io/api/enums/v1"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// A pin-first write (docs/workflows.md, "Pin first, then upload"): the write's workflow
// pins the planned object keys before the client puts a byte, so a cleanup with no guard
// window never reclaims an upload in flight, and a write whose client never finishes ends
// abandoned with its pins released.

// lateAnswers is a client's store whose data-object puts are stored at once but answered
// only when the test releases them; on each it records whether the key was pinned first.
type lateAnswers struct {
	storage.Store
	r        *rig
	prefix   string
	mu       sync.Mutex
	stored   chan string // a put was stored (its answer is held)
	release  chan struct{}
	unpinned []string // keys put while no operation pinned them
}

func (r *rig) lateAnswers(table string) *lateAnswers {
	return &lateAnswers{Store: r.inner, r: r, prefix: format.TableObjectsPrefix(r.graph, table),
		stored: make(chan string, 64), release: make(chan struct{})}
}

func (l *lateAnswers) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	if !strings.HasPrefix(key, l.prefix) {
		return l.Store.Put(ctx, key, body, opts)
	}
	if !l.r.pinnedNow(key) {
		l.mu.Lock()
		l.unpinned = append(l.unpinned, key)
		l.mu.Unlock()
	}
	res, err := l.Store.Put(ctx, key, body, opts)
	l.stored <- key
	select {
	case <-l.release:
	case <-ctx.Done():
		return res, ctx.Err()
	}
	return res, err
}

// pinnedNow reports whether an operation holds a pin on key.
func (r *rig) pinnedNow(key string) bool {
	pins, err := r.cat.PinsList(context.Background(), catalog.PinsListParams{Graph: r.graph})
	if err != nil {
		r.t.Errorf("list pins: %v", err)
		return false
	}
	return slices.ContainsFunc(pins, func(p catalog.PinRecord) bool { return p.Key == key && p.ReleasedAt.IsZero() })
}

// An append whose object put is stored but answered late, with a cleanup of no guard
// window run while it is in flight: the object was pinned before its put, the cleanup
// keeps it, and the write ends done with its rows on main.
func TestWriteTable_ObjectPutAnsweredLate_NoGuardCleanupBetween_WriteDone(t *testing.T) {
	r := runningRig(t)
	store := r.lateAnswers("a")
	type end struct {
		res workflows.WriteTableResult
		err error
	}
	ended := make(chan end, 1)
	go func() {
		res, err := r.gc.WriteTable(r.ctx, store, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "a",
			Files: writeFiles(t, "late-answered"), Append: true})
		ended <- end{res, err}
	}()
	key := <-store.stored
	cl := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if !r.exists(key) {
		t.Fatalf("the no-guard cleanup (%+v) deleted %s, an upload in flight", cl.Objects, key)
	}
	close(store.release)
	e := <-ended
	if e.err != nil || e.res.Outcome != outcome.Done {
		t.Fatalf("write: %+v, %v; want done", e.res, e.err)
	}
	recordHistory(t, r, client.WriteTableWorkflowID(r.graph, "main", e.res.OpID), "", "writetable_pinfirst_done")
	r.report("main", e.res.Commit)
	if len(store.unpinned) != 0 {
		t.Fatalf("objects put before their pin: %v", store.unpinned)
	}
	r.wantOnMain("a", "late-answered")
	if pins := r.pinsOf(e.res.OpID); slices.ContainsFunc(pins, func(p catalog.PinRecord) bool { return p.ReleasedAt.IsZero() }) {
		t.Fatalf("pins held after the write: %+v", pins)
	}
}

// Six appends at once with two cleanups of no guard window beside them — the first while
// every object is stored but unanswered, the second while half of the writes go on: every
// write ends done and main holds all six files.
func TestWriteTable_SixAppendsBesideTwoNoGuardCleanups_EveryWriteDoneAndOnMain(t *testing.T) {
	r := runningRig(t)
	store := r.lateAnswers("a")
	const n = 6
	var wg sync.WaitGroup
	results := make([]workflows.WriteTableResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = r.gc.WriteTable(r.ctx, store, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "a",
				Files: writeFiles(t, fmt.Sprintf("append-%d", i)), Append: true})
		}()
	}
	for range n {
		<-store.stored
	}
	first := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	// Release the answers one by one while the second cleanup runs.
	type cleanupEnd struct {
		res workflows.CleanupResult
		err error
	}
	cleaned := make(chan cleanupEnd, 1)
	go func() {
		res, err := r.gc.Cleanup(r.ctx, client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
		cleaned <- cleanupEnd{res, err}
	}()
	for range n {
		store.release <- struct{}{}
	}
	wg.Wait()
	c2 := <-cleaned
	if c2.err != nil {
		t.Fatalf("second cleanup: %+v, %v", c2.res, c2.err)
	}
	second := c2.res
	for i := range n {
		if errs[i] != nil || results[i].Outcome != outcome.Done {
			t.Errorf("append %d: %+v, %v; want done (cleanups: %+v, %+v)", i, results[i], errs[i], first.Objects, second.Objects)
			continue
		}
		r.report("main", results[i].Commit)
	}
	if t.Failed() {
		t.FailNow()
	}
	if len(store.unpinned) != 0 {
		t.Fatalf("objects put before their pin: %v", store.unpinned)
	}
	var bodies []string
	for i := range n {
		bodies = append(bodies, fmt.Sprintf("append-%d", i))
	}
	r.wantOnMain("a", bodies...)
}

// wantOnMain fails unless table on main's head lists exactly objects of these bodies, each
// stored.
func (r *rig) wantOnMain(table string, bodies ...string) {
	r.t.Helper()
	head := r.headOf("main")
	objs, err := graph.ListTableObjects(r.ctx, r.inner, r.graph, head.ID.String(), table)
	if err != nil {
		r.t.Fatalf("list %s on main: %v", table, err)
	}
	want := map[string]int{}
	for _, b := range bodies {
		want[sha256Of(b)]++
	}
	for _, o := range objs {
		want[o.SHA256]--
		if _, err := r.inner.Head(r.ctx, o.Key); err != nil {
			r.t.Fatalf("object %s of %s on main: %v", o.Key, table, err)
		}
	}
	for sum, left := range want {
		if left != 0 {
			r.t.Fatalf("main's %s lists %d objects; the object of SHA-256 %s is off by %d", table, len(objs), sum, left)
		}
	}
}

// plannedWrite starts a pin-first write as any client would, by workflow name: the input
// plans one small object and one large one, and Update-with-Start waits for the pins.
type plannedWrite struct {
	run          sdkclient.WorkflowRun
	in           workflows.WriteTableInput
	small, large workflows.TableObject
	smallBody    []byte
	largeSize    int64
	partSize     int64
}

func (r *rig) startPlanned(deadlineSeconds int64) *plannedWrite {
	r.t.Helper()
	m, ok := storage.AsMultipart(r.inner)
	if !ok {
		r.t.Fatal("the store has no multipart uploads")
	}
	p := &plannedWrite{smallBody: []byte("small object"), partSize: max(m.MultipartLimits().MinPartSize, 64<<10)}
	p.largeSize = 2 * p.partSize
	p.small = workflows.TableObject{ID: ulid.Make().String(), Size: int64(len(p.smallBody)), SHA256: sha256Of(string(p.smallBody))}
	p.large = workflows.TableObject{ID: ulid.Make().String(), Size: p.largeSize, SHA256: sha256Of(string(bytes.Repeat([]byte{7}, int(p.largeSize))))}
	p.in = workflows.WriteTableInput{Graph: r.graph, Branch: "main", Table: "p", Objects: []workflows.TableObject{p.small, p.large},
		OpID: randomName("w-"), AwaitUpload: true, UploadDeadlineSeconds: deadlineSeconds}
	start := r.tc.NewWithStartWorkflowOperation(sdkclient.StartWorkflowOptions{ID: randomName("op-"), TaskQueue: r.taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL}, workflows.WriteTableName, p.in)
	uh, err := r.tc.UpdateWithStartWorkflow(r.ctx, sdkclient.UpdateWithStartWorkflowOptions{StartWorkflowOperation: start,
		UpdateOptions: sdkclient.UpdateWorkflowOptions{UpdateName: workflows.PinnedUpdateName, WaitForStage: sdkclient.WorkflowUpdateStageCompleted}})
	if err != nil {
		r.t.Fatalf("update-with-start: %v", err)
	}
	var pinned workflows.PinnedResult
	if err := uh.Get(r.ctx, &pinned); err != nil || pinned.Outcome != "" {
		r.t.Fatalf("pinned: %+v, %v; want the pins", pinned, err)
	}
	if p.run, err = start.Get(r.ctx); err != nil {
		r.t.Fatal(err)
	}
	for _, o := range p.in.Objects {
		id, _ := ulid.Parse(o.ID)
		if key := format.ObjectKey(r.graph, "p", id); !r.pinnedNow(key) {
			r.t.Fatalf("graft.pinned answered, but %s is not pinned", key)
		}
	}
	return p
}

// dieMidUpload puts the small object and sends every part of the large one, then stops as
// a killed client does: no complete, no abort, no graft.uploaded.
func (p *plannedWrite) dieMidUpload(r *rig) (uploadID string) {
	r.t.Helper()
	id, _ := ulid.Parse(p.small.ID)
	if _, err := graph.UploadObject(r.ctx, r.inner, r.graph, "p", id, bytes.NewReader(p.smallBody), p.small.Size, graph.UploadOptions{}); err != nil {
		r.t.Fatalf("upload the small object: %v", err)
	}
	killed := faults.Wrap(r.inner)
	killed.Add(faults.Rule{Name: "killed", Op: faults.OpCompleteMultipart, Mode: faults.Refuse, Status: 403})
	killed.Add(faults.Rule{Name: "killed", Op: faults.OpAbortMultipart, Mode: faults.Refuse, Status: 403})
	large, _ := ulid.Parse(p.large.ID)
	_, err := graph.UploadObject(r.ctx, killed, r.graph, "p", large, bytes.NewReader(bytes.Repeat([]byte{7}, int(p.largeSize))), p.largeSize,
		graph.UploadOptions{Threshold: 1024, PartSize: p.partSize})
	if !errors.Is(err, storage.ErrRefused) {
		r.t.Fatalf("the killed upload: %v", err)
	}
	rec, err := r.inner.Get(r.ctx, format.UploadKey(r.graph, "p", large))
	if err != nil {
		r.t.Fatalf("the upload record: %v", err)
	}
	up, err := format.DecodeUpload(rec.Body)
	if err != nil || up.UploadID == "" {
		r.t.Fatalf("the upload record %s: %v", rec.Body, err)
	}
	return up.UploadID
}

// wantReleased fails unless the operation ended with outcome in the ledger and holds no
// pin (with no cleanup running, a release forgets the pins at once).
func (r *rig) wantReleased(opID string, want catalog.Outcome) {
	r.t.Helper()
	op := r.waitOp(opID, "the write to end", done)
	if op.Outcome != want {
		r.t.Fatalf("operation %+v, want outcome %s", op, want)
	}
	if pins := r.pinsOf(opID); len(pins) != 0 {
		r.t.Fatalf("operation still has %d pins after it ended: %+v", len(pins), pins)
	}
}

// A client that dies mid-upload — one object put, the other's parts sent but never
// completed — and never sends graft.uploaded: at its deadline the write ends abandoned,
// its pins released, graft.uploaded is refused, and a cleanup with no guard window leaves
// nothing of it: not the object, not the upload record, not the incomplete upload.
func TestWriteTable_ClientDiesMidUpload_AbandonedAtDeadline_NoGuardCleanupLeavesNothing(t *testing.T) {
	r := runningRig(t)
	p := r.startPlanned(1)
	uploadID := p.dieMidUpload(r)
	var res workflows.WriteTableResult
	if err := endOf(r, p.run, &res); err != nil || res.Outcome != outcome.Abandoned || res.Commit != "" {
		t.Fatalf("end: %+v, %v; want abandoned", res, err)
	}
	recordHistory(t, r, p.run.GetID(), p.run.GetRunID(), "writetable_upload_deadline_abandoned")
	r.wantReleased(p.in.OpID, catalog.OutcomeAbandoned)
	err := r.tc.SignalWorkflow(r.ctx, p.run.GetID(), p.run.GetRunID(), workflows.UploadedSignalName, workflows.UploadedRequest{})
	if err == nil {
		t.Fatal("graft.uploaded accepted after the write ended")
	}
	if head := r.headOf("main"); head.ID != r.main.ID {
		t.Fatalf("main moved to %s", head.ID)
	}

	res2 := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	small, _ := ulid.Parse(p.small.ID)
	large, _ := ulid.Parse(p.large.ID)
	r.wantGone("cleanup after the abandoned write", format.ObjectKey(r.graph, "p", small), format.ObjectKey(r.graph, "p", large),
		format.UploadKey(r.graph, "p", large))
	m, _ := storage.AsMultipart(r.inner)
	if err := storage.ListAllMultipart(r.ctx, m, format.ObjectKey(r.graph, "p", large), func(u storage.Upload) error {
		if u.UploadID == uploadID {
			return fmt.Errorf("upload %s of %s still listed (cleanup %+v)", u.UploadID, u.Key, res2.Objects)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A write waiting for its upload ends definitively when an operator cancels it (abandoned,
// by the kernel) or terminates it (failed, by the reconciler), with its pins released
// either way.
func TestWriteTable_WaitingForUpload_CancelOrTerminate_EndsWithPinsReleased(t *testing.T) {
	t.Run("cancel", func(t *testing.T) {
		r := runningRig(t)
		p := r.startPlanned(0)
		if err := r.tc.CancelWorkflow(r.ctx, p.run.GetID(), p.run.GetRunID()); err != nil {
			t.Fatal(err)
		}
		var res workflows.WriteTableResult
		if err := endOf(r, p.run, &res); err == nil {
			t.Fatalf("a cancelled write completed: %+v", res)
		}
		r.wantReleased(p.in.OpID, catalog.OutcomeAbandoned)
	})
	t.Run("terminate", func(t *testing.T) {
		r := runningRig(t)
		p := r.startPlanned(0)
		r.terminate(p.run)
		r.reconcile()
		r.wantReleased(p.in.OpID, catalog.OutcomeFailed)
	})
}

// A repeated write under the key of a finished one attaches and uploads nothing; the key
// with other bytes is refused before anything is uploaded or started.
func TestWriteTable_SameKeyOtherBytes_RefusedAndNothingUploaded(t *testing.T) {
	r := runningRig(t)
	key := randomName("k-")
	req := client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "u", Files: writeFiles(t, "x"), IdempotencyKey: key}
	first, err := r.gc.WriteTable(r.ctx, r.inner, req)
	if err != nil {
		t.Fatal(err)
	}
	r.report("main", first.Commit)
	counting := faults.Wrap(r.inner)
	req.Files = writeFiles(t, "y") // same size, other bytes
	_, err = r.gc.WriteTable(r.ctx, counting, req)
	var rc *client.RequestConflictError
	if !errors.As(err, &rc) || !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("key reused for other bytes: %v, want a request conflict", err)
	}
	if n := counting.Count(faults.OpPut).Attempted; n != 0 {
		t.Fatalf("%d puts sent, want none", n)
	}
}

// A client whose upload fails (the store refuses the object's put) ends its write at once:
// abandoned, with its pins released, rather than at its deadline.
func TestWriteTable_UploadRefused_WriteEndsAbandonedAtOnce(t *testing.T) {
	r := runningRig(t)
	refusing := faults.Wrap(r.inner)
	refusing.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: format.TableObjectsPrefix(r.graph, "a"), Mode: faults.Refuse, Status: 403})
	h := client.WriteTableWorkflowID(r.graph, "main", randomName("k-"))
	key := h[strings.LastIndexByte(h, '/')+1:]
	_, err := r.gc.WriteTable(r.ctx, refusing, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "a",
		Files: writeFiles(t, "refused"), IdempotencyKey: key})
	if !errors.Is(err, outcome.ErrRefused) {
		t.Fatalf("write with its upload refused: %v, want refused", err)
	}
	var res workflows.WriteTableResult
	if err := endOf(r, r.tc.GetWorkflow(r.ctx, h, ""), &res); err != nil || res.Outcome != outcome.Abandoned {
		t.Fatalf("the write's end: %+v, %v; want abandoned", res, err)
	}
	r.wantReleased(key, catalog.OutcomeAbandoned)
}

// A write whose client uploaded everything and sent graft.uploaded, reset by an operator
// to its first workflow task — before its pins — while it writes its manifest, still ends
// done: the reset reapplies the signal, so the reset run pins again and goes on instead of
// waiting out its deadline.
func TestWriteTable_UploadedThenResetBeforeItsPins_ResetRunEndsDone(t *testing.T) {
	r := runningRig(t)
	p := r.startPlanned(0)
	for _, o := range []struct {
		obj  workflows.TableObject
		body []byte
	}{{p.small, p.smallBody}, {p.large, bytes.Repeat([]byte{7}, int(p.largeSize))}} {
		id, _ := ulid.Parse(o.obj.ID)
		if _, err := graph.UploadObject(r.ctx, r.inner, r.graph, "p", id, bytes.NewReader(o.body), o.obj.Size, graph.UploadOptions{}); err != nil {
			t.Fatalf("upload %s: %v", o.obj.ID, err)
		}
	}
	manifest, once := make(chan struct{}), sync.Once{}
	slow := r.store.Add(faults.Rule{KeyPrefix: format.TableVersionsPrefix(r.graph, "p"), Match: func(op faults.Op, _ string) bool {
		once.Do(func() { close(manifest) })
		return op == faults.OpPut
	}, Mode: faults.Delay, Delay: 3 * time.Second})
	defer slow()
	if err := r.tc.SignalWorkflow(r.ctx, p.run.GetID(), p.run.GetRunID(), workflows.UploadedSignalName, workflows.UploadedRequest{}); err != nil {
		t.Fatal(err)
	}
	<-manifest
	first := workflowTasksCompleted(t, r, p.run.GetID(), p.run.GetRunID())[0]
	resetRun := resetTo(t, r, p.run.GetID(), p.run.GetRunID(), first, "operator reset before the pins")
	slow()
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	var res workflows.WriteTableResult
	if err := endOfCtx(ctx, r, r.tc.GetWorkflow(r.ctx, p.run.GetID(), resetRun), &res); err != nil || res.Outcome != outcome.Done ||
		res.Commit == "" || res.Message != "" {
		t.Fatalf("the reset run: %+v, %v; want done with its commit", res, err)
	}
	if d, err := r.tc.DescribeWorkflowExecution(r.ctx, p.run.GetID(), p.run.GetRunID()); err != nil ||
		d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Fatalf("the first run: %v, %v; want terminated by the reset", d.GetWorkflowExecutionInfo().GetStatus(), err)
	}
	r.report("main", res.Commit)
	r.wantReleased(p.in.OpID, catalog.OutcomeDone)
}

// pinChecking is a client's store that records every put under a table's keys made while
// no operation pinned the key, and holds data-object puts, stored but unanswered, until
// the test releases them.
type pinChecking struct {
	storage.Store
	r        *rig
	table    string
	mu       sync.Mutex
	unpinned []string
	once     sync.Once
	first    chan struct{} // a data object is stored (its answer held)
	release  chan struct{}
}

func (p *pinChecking) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	if strings.HasPrefix(key, format.TablePrefix(p.r.graph, p.table)) && !p.r.pinnedNow(key) {
		p.mu.Lock()
		p.unpinned = append(p.unpinned, key)
		p.mu.Unlock()
	}
	res, err := p.Store.Put(ctx, key, body, opts)
	if strings.HasPrefix(key, format.TableObjectsPrefix(p.r.graph, p.table)) {
		p.once.Do(func() { close(p.first) })
		select {
		case <-p.release:
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	return res, err
}

// A write of more files than a request lists inline stages its list: the list's record
// and chunks, and every object, are pinned before their first byte, so a cleanup with no
// guard window while the objects are in flight keeps them all, and the write ends done
// with every file on main.
func TestWriteTable_StagedList_PinnedBeforeItsFirstByte_NoGuardCleanupBetween_WriteDone(t *testing.T) {
	r := runningRig(t)
	n := workflows.MaxInlineObjects + 1
	files, bodies := make([]string, 0, n), make([]string, n)
	for i := range bodies {
		bodies[i] = fmt.Sprintf("staged-%d", i)
	}
	files = append(files, writeFiles(t, bodies...)...)
	store := &pinChecking{Store: r.inner, r: r, table: "s", first: make(chan struct{}), release: make(chan struct{})}
	type end struct {
		res workflows.WriteTableResult
		err error
	}
	ended := make(chan end, 1)
	go func() {
		res, err := r.gc.WriteTable(r.ctx, store, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "s", Files: files})
		ended <- end{res, err}
	}()
	<-store.first
	cl := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	close(store.release)
	e := <-ended
	if e.err != nil || e.res.Outcome != outcome.Done || e.res.Objects != n {
		t.Fatalf("write: %+v, %v; want done with %d objects (cleanup beside it: %+v)", e.res, e.err, n, cl.Objects)
	}
	r.report("main", e.res.Commit)
	if len(store.unpinned) != 0 {
		t.Fatalf("%d keys put before their pin, among them %v", len(store.unpinned), store.unpinned[:min(3, len(store.unpinned))])
	}
	r.wantOnMain("s", bodies...)
}
