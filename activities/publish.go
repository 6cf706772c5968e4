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

// The commit write (docs/format.md, "Appending a commit"): the plan's new chunks and its
// commit, put-if-absent, then the ref's compare-and-swap from the version the plan read,
// which is the head check: a stale plan or a late re-issue is Other.

// ChunkPut is one content-addressed chunk a write puts before the object that names it.
type ChunkPut struct {
	Key  string `json:"key"`
	Body []byte `json:"body"`
}

func publishSpec(graphName string, p graph.AppendPlan, landed outcome.Outcome) WriteSpec {
	return WriteSpec{Kind: WritePublish, Graph: graphName, Body: p.CommitBody, Ref: p.Publish.Body, Chunks: chunkPuts(p.Chunks),
		Native: p.Publish.Native, ETag: p.Publish.IfMatch, Landed: landed, Subject: p.Commit.ID.String()}
}

func chunkPuts(chunks []graph.Chunk) []ChunkPut {
	return mapped(chunks, func(c graph.Chunk) ChunkPut { return ChunkPut{Key: c.Key, Body: c.Body} })
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
	p.Chunks = mapped(w.Chunks, func(ch ChunkPut) graph.Chunk { return graph.Chunk{Key: ch.Key, Body: ch.Body} })
	return p, nil
}

// pinAndRecord pins every key a plan writes before anything is written (a chunk that exists
// already may be shared with what a cleanup is reclaiming) and, with spec, records spec as
// the pending write: one ledger transaction guarded by o (WriteInput.PendingRecorded).
// Manifest chunks are pinned as table versions; pins and lineage chunks and commits as commits.
func (a *Activities) pinAndRecord(ctx context.Context, o Owner, graphName string, pins []catalog.Pin, spec *WriteSpec) (outcome.Outcome, string, error) {
	if len(pins) == 0 && spec == nil {
		return "", "", nil
	}
	err := a.Catalog.InTx(ctx, func(tx pgx.Tx) error {
		err := a.Catalog.PinsRegisterTx(ctx, tx, catalog.PinsRegisterParams{OpID: o.OpID, Graph: graphName, Pins: pins, Owner: o.Run})
		if err != nil || spec == nil {
			return err
		}
		return a.recordPendingTx(ctx, tx, o, *spec)
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

// recordPendingTx records spec as o's pending write, in tx.
func (a *Activities) recordPendingTx(ctx context.Context, tx pgx.Tx, o Owner, spec WriteSpec) error {
	pending, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode pending write: %w", err)
	}
	_, err = a.Catalog.OperationProgressTx(ctx, tx, catalog.OperationProgressParams{ID: o.OpID, Owner: o.Run,
		Pending: pending, Phase: "write", Waiting: spec.Describe()})
	return err
}

func keyPins(kind catalog.ObjectKind, keys ...string) []catalog.Pin {
	return mapped(keys, func(k string) catalog.Pin { return catalog.Pin{Kind: kind, Key: k} })
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

// openPublish decodes a publish spec and opens its graph, or says why not (Invalid).
func (a *Activities) openPublish(w WriteSpec) (graph.AppendPlan, *graph.Graph, *Verdict) {
	p, err := publishOf(w)
	if err != nil {
		return p, nil, &Verdict{State: Invalid, Message: "not a publishable commit: " + err.Error()}
	}
	g, err := a.openGraph(w.Graph)
	if err != nil {
		return p, nil, &Verdict{State: Invalid, Message: err.Error()}
	}
	return p, g, nil
}

// putPublish writes a plan's chunks and commit (content-addressed), then swaps the ref; a
// re-issue reads the ref first and goes on only if it is still what the plan read.
func (a *Activities) putPublish(ctx context.Context, in WriteInput) (Verdict, error) {
	p, g, bad := a.openPublish(in.Spec)
	if bad != nil {
		return *bad, nil
	}
	if in.Attempt > 0 {
		// A swap that can no longer land must not be preceded by puts: read first.
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

// putFailed is the verdict of a failed put not read back: refused, or else ambiguous.
func putFailed(err error) Verdict {
	if v := putVerdict(err); v.State != "" {
		return v
	}
	return Verdict{State: Ambiguous, Message: err.Error()}
}

func (a *Activities) readPublish(ctx context.Context, in WriteInput) (Verdict, error) {
	p, g, bad := a.openPublish(in.Spec)
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
