// Package activities holds graft's activities: each performs one storage phase
// of a branch operation (clone, publish a ref, read it back, fence, reclaim)
// and records in the ledger, before each effect, what may now exist. They are
// methods on Activities, which holds the store and the catalog; workflows refer
// to them through a typed nil pointer and never hold a dependency themselves.
//
// Every activity is idempotent: a retry after a lost result repeats the same
// put with the same bytes, or finds the ledger already in the target state.
// Outcomes a workflow branches on are returned as results; errors are reserved
// for failures worth retrying (storage or Postgres unavailable).
package activities

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"time"

	"github.com/oklog/ulid/v2"
	sdklog "go.temporal.io/sdk/log"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// Activities performs graft's storage phases against one store and ledger.
type Activities struct {
	Store    storage.Store    // every graph, each under its own prefix; required
	Catalog  *catalog.Catalog // the ledger; required
	Observer Observer         // receives phase outcomes for metrics; optional
	// Now is the clock for age checks (cleanup's guard window). Defaults to time.Now.
	Now func() time.Time
	// Workflows answers whether a workflow has closed; without it the reconciler settles
	// nothing.
	Workflows WorkflowStatus
	// Logger receives the logs of code run outside an activity (tests, tools). Optional.
	Logger sdklog.Logger
	// Chunks keeps the pins and lineage chunks operations read or write, for the next
	// (graph.ChunkCache); optional: nil reads every chunk from the store. Cleanup always
	// reads the store.
	Chunks *graph.ChunkCache
}

// openGraph opens graph name on the store, sharing Chunks.
func (a *Activities) openGraph(name string) (*graph.Graph, error) {
	g, err := graph.Open(a.Store, name)
	if err != nil || a.Chunks == nil {
		return g, err
	}
	return g.ShareChunks(a.Chunks), nil
}

// WorkflowStatus tells the reconciler whether a workflow has closed (worker.TemporalWorkflows).
type WorkflowStatus interface {
	// WorkflowClosed reports whether the workflow has no open run, or is unknown to Temporal
	// (its history expired: lost).
	WorkflowClosed(ctx context.Context, workflowID string) (bool, error)
}

func (a *Activities) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Observer is told what each phase proved, so a worker can export metrics without the
// activities importing a metrics library (counts in doubt or swept come from the ledger).
type Observer interface {
	OperationFinished(kind, outcome string)   // an operation has a definitive outcome
	Settled(kind string, after time.Duration) // an in-doubt step settled after this long
}

func (a *Activities) observeFinished(kind, out string) {
	if a.Observer != nil {
		a.Observer.OperationFinished(kind, out)
	}
}

// nativeULID derives an incarnation's ULID from its operation (the time part, its start)
// and attempt, so a retried prepare mints the same native name rather than a second one.
func nativeULID(opID string, attempt int, t time.Time) ulid.ULID {
	sum := sha256.Sum256(binary.BigEndian.AppendUint64([]byte(opID), uint64(attempt)))
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(t))
	_ = id.SetEntropy(sum[:10])
	return id
}

// firstError is the first non-nil of errs: an activity's input checks, in order.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// mapped is f of each of xs, nil when xs is empty.
func mapped[T, U any](xs []T, f func(T) U) []U {
	var out []U
	for _, x := range xs {
		out = append(out, f(x))
	}
	return out
}

// setOf is the set of xs.
func setOf[K comparable](xs []K) map[K]bool {
	set := make(map[K]bool, len(xs))
	for _, x := range xs {
		set[x] = true
	}
	return set
}

// validAuthor checks an author when one is given; "" takes the default.
func validAuthor(author string) error {
	if author == "" {
		return nil
	}
	return format.ValidateAuthor(author)
}

// opRecord is the ledger record of an operation this run claims: inputs are the request as
// the ledger compares a repeated one.
func opRecord(kind catalog.OperationKind, opID, graphName, workflowID, runID string, inputs any) catalog.OperationInsertParams {
	in, _ := json.Marshal(inputs)
	return catalog.OperationInsertParams{ID: opID, Kind: kind, Graph: graphName, Inputs: in, WorkflowID: workflowID, RunID: runID, Owner: runID}
}
