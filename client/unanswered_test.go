package client

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	sdkclient "go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/localfs"
	"github.com/graftworks/graft/workflows"
)

// answerDropper is a TCP proxy in front of the Temporal dev server that, once
// armed, still carries every request to the server but drops every byte of its
// answers: the network losing Temporal's answer after Temporal applied the request.
type answerDropper struct {
	ln    net.Listener
	drop  atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func newAnswerDropper(t *testing.T, upstream string) *answerDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &answerDropper{ln: ln}
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				down.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, down, up)
			p.mu.Unlock()
			go io.Copy(up, down)
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := up.Read(buf)
					if n > 0 && !p.drop.Load() {
						if _, werr := down.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

// dial returns a Temporal client whose connection goes through the proxy.
func (p *answerDropper) dial(t *testing.T) sdkclient.Client {
	t.Helper()
	return dialQuiet(t, sdkclient.Options{HostPort: p.ln.Addr().String(), Namespace: testenv.Temporal(t).Namespace})
}

// TestStartCreateBranch_StartAppliedAnswerLost_UnansweredErrorNamesTheOpAndItsRepeatAttaches:
// a create's start that Temporal applied but whose answer the network lost is an
// *UnansweredError naming the operation id and workflow, matching the caller's
// context.DeadlineExceeded; the workflow did start, and the request repeated with that
// operation id attaches to the same run instead of starting another.
func TestStartCreateBranch_StartAppliedAnswerLost_UnansweredErrorNamesTheOpAndItsRepeatAttaches(t *testing.T) {
	s := newStubStack(t, func(w sdkworker.Worker) {
		registerCreate(w, func(ctx workflow.Context, in workflows.CreateBranchInput) (workflows.CreateBranchResult, error) {
			_ = workflow.Sleep(ctx, time.Minute)
			return workflows.CreateBranchResult{Outcome: "created", OpID: in.OpID, Graph: in.Graph, Branch: in.Branch}, nil
		})
	})
	ts := testenv.Temporal(t)
	p := newAnswerDropper(t, ts.HostPort)
	lossy := New(p.dial(t), Options{TaskQueue: s.queue})
	p.drop.Store(true)

	// Without a key the start is the first request sent (a given key is looked up first,
	// for a finished run of it).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := lossy.StartCreateBranch(ctx, CreateBranchRequest{Graph: "g", Branch: "lost-answer"})
	var ua *UnansweredError
	if !errors.As(err, &ua) {
		t.Fatalf("err %v (%T), want an *UnansweredError", err, err)
	}
	wid := CreateBranchWorkflowID("g", "lost-answer")
	if ua.OpID == "" || ua.WorkflowID != wid || !strings.Contains(ua.Request, "create branch lost-answer in g") {
		t.Fatalf("unanswered error %+v, want an op id and workflow %s", ua, wid)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v does not match the caller's context.DeadlineExceeded", err)
	}

	// The start was applied: the workflow runs.
	dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer dcancel()
	desc, err := s.tc.DescribeWorkflowExecution(dctx, wid, "")
	if err != nil {
		t.Fatalf("describe %s: %v (the lost-answer start did not land)", wid, err)
	}
	t.Cleanup(func() { _ = s.tc.TerminateWorkflow(context.Background(), wid, "", "test over") })
	// Repeated with the operation id, the request attaches to that run.
	h, err := s.client(Options{}).StartCreateBranch(dctx, CreateBranchRequest{Graph: "g", Branch: "lost-answer", IdempotencyKey: ua.OpID})
	if err != nil {
		t.Fatal(err)
	}
	if run := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId(); h.RunID != run {
		t.Fatalf("repeat started run %s, want the lost-answer start's run %s", h.RunID, run)
	}
}

// TestStartWriteTable_LookupUnanswered_UnansweredErrorNamesTheKey: a write with an
// idempotency key first looks the key's workflow up; when Temporal never answers, the
// write is an *UnansweredError naming the key (an earlier request under it may run),
// before anything is uploaded.
func TestStartWriteTable_LookupUnanswered_UnansweredErrorNamesTheKey(t *testing.T) {
	s := newStubStack(t, nil)
	ts := testenv.Temporal(t)
	p := newAnswerDropper(t, ts.HostPort)
	lossy := New(p.dial(t), Options{TaskQueue: s.queue})
	p.drop.Store(true)

	dir := t.TempDir()
	store, err := localfs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "part-0.csv")
	if err := os.WriteFile(file, []byte("id\n1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	key := ulid.Make().String()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = lossy.StartWriteTable(ctx, store, WriteTableRequest{Graph: "g", Branch: "main", Table: "t", Files: []string{file}, IdempotencyKey: key})
	var ua *UnansweredError
	if !errors.As(err, &ua) || ua.OpID != key || ua.WorkflowID != WriteTableWorkflowID("g", "main", key) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v (%T), want an *UnansweredError naming key %s", err, err, key)
	}
	if page, err := store.List(context.Background(), storage.ListOptions{}); err != nil || len(page.Objects) != 0 {
		t.Fatalf("store holds %v (%v), want nothing uploaded", page.Objects, err)
	}
}

// TestStartCreateBranch_NamespaceUnknown_IsNotUnanswered: a start Temporal refuses
// definitively (no such namespace) is an error that names the request, never an
// *UnansweredError: nothing may have started.
func TestStartCreateBranch_NamespaceUnknown_IsNotUnanswered(t *testing.T) {
	tc := dialQuiet(t, sdkclient.Options{HostPort: testenv.Temporal(t).HostPort, Namespace: "graft-no-such-namespace"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := New(tc, Options{TaskQueue: "graft-nowhere"}).StartCreateBranch(ctx, CreateBranchRequest{Graph: "g", Branch: "b"})
	var ua *UnansweredError
	if err == nil || errors.As(err, &ua) || !strings.Contains(err.Error(), "start create branch b in g") {
		t.Fatalf("err %v (%T), want a definitive error naming the start", err, err)
	}
}

// TestStartWriteTable_TerminatedBeforeItPins_ReportsTheEndNotAStartError: a write whose
// run an operator terminates before it accepts the client's pin update (here: no worker
// polls its queue) ends as the workflow ended, not as an unanswered start.
func TestStartWriteTable_TerminatedBeforeItPins_ReportsTheEndNotAStartError(t *testing.T) {
	s := newStubStack(t, nil) // nothing polls the queue: the pin update is never accepted
	store, _ := newGraph(t)
	file := filepath.Join(t.TempDir(), "part-0.csv")
	if err := os.WriteFile(file, []byte("id\n1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	key := ulid.Make().String()
	wid := WriteTableWorkflowID("sales", "main", key)
	go func() {
		for range 200 {
			if _, err := s.tc.DescribeWorkflowExecution(context.Background(), wid, ""); err == nil {
				_ = s.tc.TerminateWorkflow(context.Background(), wid, "", "operator")
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := s.client(Options{}).WriteTable(ctx, store, WriteTableRequest{Graph: "sales", Branch: "main", Table: "t", Files: []string{file}, IdempotencyKey: key})
	var we *WorkflowError
	var ua *UnansweredError
	if errors.As(err, &ua) || !errors.As(err, &we) || we.Status != "terminated" {
		t.Fatalf("err %v (%T), want the terminated workflow's *WorkflowError", err, err)
	}
	if page, err := store.List(context.Background(), storage.ListOptions{Prefix: "sales/tables/"}); err != nil || len(page.Objects) != 0 {
		t.Fatalf("store holds %v (%v), want nothing uploaded", page.Objects, err)
	}
}
