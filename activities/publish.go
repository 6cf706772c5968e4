package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
)

// The commit write (docs/format.md, "Appending a commit"): the plan's new chunks
// and its content-addressed commit, put-if-absent (pinned first, by the plan step), then the
// head swap — the ref's compare-and-swap from the version the plan read to one naming the
// new commit. The swap is the head check: it lands only while the ref is exactly what the
// plan read, so a stale plan or a late re-issue is Other, never a commit behind the head.

// ChunkPut is one content-addressed chunk a write puts before the object that
// names it.
type ChunkPut struct {
	Key  string `json:"key"`
	Body []byte `json:"body"`
}

// publishSpec builds the kernel's write of a planned append.
func publishSpec(graphName string, p graph.AppendPlan, landed outcome.Outcome) WriteSpec {
	return WriteSpec{Kind: WritePublish, Graph: graphName, Body: p.CommitBody, Ref: p.Publish.Body, Chunks: chunkPuts(p.Chunks),
		Native: p.Publish.Native, ETag: p.Publish.IfMatch, Landed: landed, Subject: p.Commit.ID.String()}
}

// chunkPuts are chunks as a write carries them.
func chunkPuts(chunks []graph.Chunk) []ChunkPut {
	var out []ChunkPut
	for _, c := range chunks {
		out = append(out, ChunkPut{Key: c.Key, Body: c.Body})
	}
	return out
}

// publishOf decodes a publish spec back into the plan it was built from.
func publishOf(w WriteSpec) (graph.AppendPlan, error) {
	c, err := format.DecodeCommit(w.Body)
	if err != nil {
		return graph.AppendPlan{}, err
	}
	if len(w.Ref) == 0 || w.ETag == "" || w.Native == "" {
		return graph.AppendPlan{}, errors.New("a publish needs the new ref's bytes, the native name and the ETag read")
	}
	p := graph.AppendPlan{Commit: c, CommitKey: format.CommitIDKey(w.Graph, c.ID), CommitBody: w.Body,
		Publish: graph.Publish{Native: w.Native, IfMatch: w.ETag, Body: w.Ref, Commit: c.ID}}
	for _, ch := range w.Chunks {
		p.Chunks = append(p.Chunks, graph.Chunk{Key: ch.Key, Body: ch.Body})
	}
	return p, nil
}

// pinKeys pins every key a plan writes (chunks, then the commit) for the
// operation, before anything is written: a chunk that exists already may be shared with
// what a cleanup is reclaiming, so the pin keeps it. Manifest chunks are pinned as table
// versions, pins and lineage chunks and commits as commits.
func (a *Activities) pinKeys(ctx context.Context, o Owner, graphName string, kind catalog.ObjectKind, keys []string) (outcome.Outcome, string, error) {
	if len(keys) == 0 {
		return "", "", nil
	}
	err := a.Catalog.PinsRegister(ctx, catalog.PinsRegisterParams{OpID: o.OpID, Graph: graphName, Pins: keyPins(kind, keys...), Owner: o.Run})
	switch {
	case errors.Is(err, catalog.ErrCondemned):
		return outcome.NotRetained, fmt.Sprintf("a key the write names is condemned by a running cleanup: %v", err), nil
	case errors.Is(err, catalog.ErrNotOwner), errors.Is(err, catalog.ErrStateConflict):
		return outcome.Conflict, fmt.Sprintf("operation %s is no longer this run's: %v", o.OpID, err), nil
	case err != nil:
		return "", "", fmt.Errorf("pin keys: %w", err)
	}
	return "", "", nil
}

// pinAndRecord registers pins and records spec as the operation's pending write, in one
// ledger transaction guarded by o: the last step before a write pins what the write names
// and witnesses the write itself with one commit, and the kernel's first attempt then only
// checks it (WriteInput.PendingRecorded). Outcomes as pinKeys'.
func (a *Activities) pinAndRecord(ctx context.Context, o Owner, graphName string, pins []catalog.Pin, spec WriteSpec) (outcome.Outcome, string, error) {
	err := a.Catalog.InTx(ctx, func(tx pgx.Tx) error {
		if err := a.Catalog.PinsRegisterTx(ctx, tx, catalog.PinsRegisterParams{OpID: o.OpID, Graph: graphName, Pins: pins, Owner: o.Run}); err != nil {
			return err
		}
		return a.recordPendingTx(ctx, tx, o, spec)
	})
	switch {
	case errors.Is(err, catalog.ErrCondemned):
		return outcome.NotRetained, fmt.Sprintf("a key the write names is condemned by a running cleanup: %v", err), nil
	case errors.Is(err, catalog.ErrNotOwner), errors.Is(err, catalog.ErrStateConflict), errors.Is(err, catalog.ErrNotFound):
		return outcome.Conflict, fmt.Sprintf("operation %s is no longer this run's: %v", o.OpID, err), nil
	case err != nil:
		return "", "", fmt.Errorf("pin keys and record the write: %w", err)
	}
	return "", "", nil
}

// recordPendingTx records spec as o's pending write, in tx: the operation is in its write
// phase, waiting on it.
func (a *Activities) recordPendingTx(ctx context.Context, tx pgx.Tx, o Owner, spec WriteSpec) error {
	pending, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode pending write: %w", err)
	}
	_, err = a.Catalog.OperationProgressTx(ctx, tx, catalog.OperationProgressParams{ID: o.OpID, Owner: o.Run,
		Pending: pending, Phase: "write", Waiting: spec.Describe()})
	return err
}

// keyPins pins keys as kind.
func keyPins(kind catalog.ObjectKind, keys ...string) []catalog.Pin {
	pins := make([]catalog.Pin, 0, len(keys))
	for _, k := range keys {
		pins = append(pins, catalog.Pin{Kind: kind, Key: k})
	}
	return pins
}

// publishVerdict classifies what Publish, SettlePublish or CheckPublish said.
func publishVerdict(res graph.PublishResult, pending bool, err error) (Verdict, error) {
	var stale *graph.StaleHeadError
	var changed *graph.RefChangedError
	switch {
	case err == nil && pending:
		return Verdict{State: Ambiguous, Message: "the head swap has not landed yet and still may"}, nil
	case err == nil:
		return Verdict{State: Landed, Commit: res.Head.String()}, nil
	case errors.As(err, &stale):
		return Verdict{State: Other, Message: stale.Error()}, nil
	case errors.As(err, &changed):
		return Verdict{State: Other, Message: changed.Error()}, nil
	case errors.Is(err, graph.ErrInvalid), errors.Is(err, graph.ErrCorrupt):
		return Verdict{State: Invalid, Message: err.Error()}, nil
	case isUnreadableObject(err), errors.Is(err, graph.ErrCommitNotFound):
		// The ref, or a commit between its head and ours, cannot be read: our swap did not
		// land on what a reader sees.
		return Verdict{State: Other, Message: err.Error()}, nil
	}
	return putFailed(err), nil
}

// openPublish decodes a publish spec and opens its graph; a non-nil Verdict (Invalid)
// says why it cannot.
func (a *Activities) openPublish(w WriteSpec) (graph.AppendPlan, *graph.Graph, *Verdict) {
	p, err := publishOf(w)
	if err != nil {
		return p, nil, &Verdict{State: Invalid, Message: "not a publishable commit: " + err.Error()}
	}
	g, err := graph.Open(a.Store, w.Graph)
	if err != nil {
		return p, nil, &Verdict{State: Invalid, Message: err.Error()}
	}
	return p, g, nil
}

// putPublish writes a plan's chunks and commit (content-addressed: a re-issue writes the
// same bytes), then swaps the ref. The first attempt swaps at once; a re-issue reads the
// ref first and swaps only if it is still what the plan read.
func (a *Activities) putPublish(ctx context.Context, in WriteInput) (Verdict, error) {
	p, g, bad := a.openPublish(in.Spec)
	if bad != nil {
		return *bad, nil
	}
	if in.Attempt > 0 {
		// Whatever landed before, a swap that can no longer land must not be preceded by
		// puts: read first.
		res, pending, err := g.CheckPublish(ctx, p.Publish)
		if !pending {
			return publishVerdict(res, false, err)
		}
	}
	for _, put := range in.Spec.Pre {
		// In order: a version is never stored before its chunks.
		res, err := graph.PutIfAbsent(ctx, a.Store, put.Key, put.Body)
		switch {
		case err == nil && res.Outcome == graph.PutTaken:
			return Verdict{State: Invalid, Message: put.Key + " holds other bytes than the write's"}, nil
		case err != nil:
			return putFailed(err), nil
		}
	}
	if err := g.WriteAppend(ctx, p); err != nil {
		if errors.Is(err, graph.ErrCorrupt) {
			return Verdict{State: Invalid, Message: err.Error()}, nil
		}
		return putFailed(err), nil
	}
	res, err := g.Publish(ctx, p.Publish)
	return publishVerdict(res, false, err)
}

// putFailed is the verdict of a failed put the write cannot read back: refused, or
// ambiguous (a failed precondition included).
func putFailed(err error) Verdict {
	if v := putVerdict(err); v.State != "" {
		return v
	}
	return Verdict{State: Ambiguous, Message: err.Error()}
}

// readPublish says where a publish stands, without writing.
func (a *Activities) readPublish(ctx context.Context, w WriteSpec) (Verdict, error) {
	p, g, bad := a.openPublish(w)
	if bad != nil {
		return *bad, nil
	}
	return publishVerdict(g.CheckPublish(ctx, p.Publish))
}

// fencePublish makes a publish unable to land (graph.FencePublish: the ref rewritten, same
// head, by this operation), or proves that it landed.
func (a *Activities) fencePublish(ctx context.Context, in WriteInput) (Verdict, error) {
	p, g, bad := a.openPublish(in.Spec)
	if bad != nil {
		return *bad, nil
	}
	v, err := publishVerdict(g.FencePublish(ctx, p.Publish, in.Owner.OpID))
	if err == nil && v.State == Other {
		v.State = Fenced
	}
	return v, err
}
