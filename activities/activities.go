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
	"github.com/graftworks/graft/storage"
)

// Activities performs graft's storage phases against one store and ledger.
type Activities struct {
	// Store holds every graph, each under its own prefix. Required.
	Store storage.Store
	// Catalog is the ledger. Required.
	Catalog *catalog.Catalog
	// Observer receives phase outcomes for metrics. Defaults to none.
	Observer Observer
	// Now is the clock for age checks (cleanup's guard window). Defaults to time.Now.
	Now func() time.Time
	// Workflows answers whether a workflow has closed, for the reconciler. Defaults to
	// nil: the reconciler then settles nothing (it cannot tell a closed workflow from a
	// running one).
	Workflows WorkflowStatus
	// Logger receives the logs of code run outside an activity (tests, tools); inside
	// one the activity's logger is used. Defaults to none.
	Logger sdklog.Logger
}

// WorkflowStatus tells the reconciler whether a workflow has closed. The worker wires it
// to the Temporal client (worker.TemporalWorkflows).
type WorkflowStatus interface {
	// WorkflowClosed reports whether the workflow with this id has no open run:
	// completed, failed, cancelled, terminated, timed out, continued into a run that
	// has closed too, or unknown to Temporal (its history expired: lost).
	WorkflowClosed(ctx context.Context, workflowID string) (bool, error)
}

func (a *Activities) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Observer is told what each phase proved, so a worker can export metrics
// without the activities importing a metrics library. Counts of what is in
// doubt or was swept are read from the ledger, which every worker shares.
type Observer interface {
	// OperationFinished is called once an operation has a definitive outcome.
	OperationFinished(kind, outcome string)
	// Settled is called when an in-doubt step was settled, with how long it was in doubt.
	Settled(kind string, after time.Duration)
}

func (a *Activities) observeFinished(kind, out string) {
	if a.Observer != nil {
		a.Observer.OperationFinished(kind, out)
	}
}

// nativeULID derives an incarnation's ULID from its operation and attempt, so
// a retried prepare mints the same native name rather than a second one. The
// time part is the operation's start; the entropy is a hash of op and attempt.
func nativeULID(opID string, attempt int, t time.Time) ulid.ULID {
	h := sha256.New()
	h.Write([]byte(opID))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(attempt))
	h.Write(b[:])
	sum := h.Sum(nil)
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

// validAuthor checks an author when one is given; "" takes the default.
func validAuthor(author string) error {
	if author == "" {
		return nil
	}
	return format.ValidateAuthor(author)
}

// opRecord is the ledger record of an operation this run claims (OperationInsertParams with
// Owner the run): inputs are the request as the ledger compares a repeated one.
func opRecord(kind catalog.OperationKind, opID, graphName, workflowID, runID string, inputs any) catalog.OperationInsertParams {
	in, _ := json.Marshal(inputs)
	return catalog.OperationInsertParams{ID: opID, Kind: kind, Graph: graphName, Inputs: in, WorkflowID: workflowID, RunID: runID, Owner: runID}
}
