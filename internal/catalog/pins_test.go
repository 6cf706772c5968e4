package catalog_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

const (
	v1 = "g/tables/t/versions/01A.json"
	v2 = "g/tables/t/versions/01B.json"
	v3 = "g/tables/t/versions/01C.json"
)

func register(t *testing.T, c *catalog.Catalog, opID string, ps ...catalog.Pin) error {
	t.Helper()
	return c.PinsRegister(ctxFor(t), catalog.PinsRegisterParams{OpID: opID, Graph: "g", Pins: ps})
}

func TestPinsRegister_KeyCondemnedByRunningSweep_IsCondemnedListingOnlyThatKey(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	run := newRun(t, c, "g", catalog.CleanupSweep)
	condemn(t, c, run.ID, v2)
	op := newOp(t, c, catalog.OpCreateBranch, "g")

	err := register(t, c, op.ID, pins(v1, v2, v3)...)
	var condemned *catalog.CondemnedError
	if !errors.Is(err, catalog.ErrCondemned) || !errors.As(err, &condemned) || !slices.Equal(condemned.Keys, []string{v2}) {
		t.Fatalf("pin a condemned key: err = %v, want CondemnedError listing %s", err, v2)
	}
	held, err := c.PinsList(ctxFor(t), catalog.PinsListParams{Graph: "g"})
	if err != nil || len(held) != 0 {
		t.Errorf("pins after a refused registration: %+v, %v; want none (all or nothing)", held, err)
	}
}

func TestPinsRegister_KeyCondemnedByFinishedOrDryRun_IsAllowed(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	finished := newRun(t, c, "g", catalog.CleanupSweep)
	condemn(t, c, finished.ID, v1)
	if _, err := c.CleanupRunFinish(ctxFor(t), catalog.CleanupRunFinishParams{ID: finished.ID, State: catalog.CleanupAborted}); err != nil {
		t.Fatalf("finish run: %v", err)
	}
	dry := newRun(t, c, "g", catalog.CleanupDryRun)
	condemn(t, c, dry.ID, v2)
	elsewhere := newRun(t, c, "other-graph", catalog.CleanupSweep)
	condemn(t, c, elsewhere.ID, v3)

	op := newOp(t, c, catalog.OpCreateBranch, "g")
	if err := register(t, c, op.ID, pins(v1, v2, v3)...); err != nil {
		t.Fatalf("pin keys condemned only by a finished run, a dry run and another graph's run: %v", err)
	}
	held, err := c.PinsList(ctxFor(t), catalog.PinsListParams{Graph: "g"})
	if err != nil || len(held) != 3 || held[0].OpID != op.ID || !held[0].ReleasedAt.IsZero() {
		t.Errorf("held pins %+v, %v; want three held by %s", held, err, op.ID)
	}
}

func TestPinsRegister_PrefixesOnEitherSide_Conflict(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	run := newRun(t, c, "g", catalog.CleanupSweep)
	if skipped := condemn(t, c, run.ID, "g/trees/dead.01A/", "g/tables/u/versions/01A.json"); len(skipped) != 0 {
		t.Fatalf("condemn skipped %v with no pins", skipped)
	}
	op := newOp(t, c, catalog.OpCreateBranch, "g")

	// A key under a condemned tree prefix.
	err := register(t, c, op.ID, catalog.Pin{Kind: catalog.ObjectCommit, Key: "g/trees/dead.01A/commits/0001.json"})
	if !errors.Is(err, catalog.ErrCondemned) {
		t.Errorf("pin a commit inside a condemned tree: err = %v, want ErrCondemned", err)
	}
	// A prefix pin covering a condemned key.
	err = register(t, c, op.ID, catalog.Pin{Kind: catalog.ObjectTree, Key: "g/tables/u/"})
	if !errors.Is(err, catalog.ErrCondemned) {
		t.Errorf("pin a prefix holding a condemned key: err = %v, want ErrCondemned", err)
	}
	// Neighbours that only share a string prefix, not a "/"-prefix, do not conflict.
	err = register(t, c, op.ID,
		catalog.Pin{Kind: catalog.ObjectTree, Key: "g/trees/dead.01A0/"},
		catalog.Pin{Kind: catalog.ObjectCommit, Key: "g/trees/dead.01/commits/0001.json"},
		catalog.Pin{Kind: catalog.ObjectTableVersion, Key: "g/tables/u/versions/01A.json.bak"})
	if err != nil {
		t.Errorf("pin neighbours of condemned keys: %v", err)
	}
}

func TestCondemnedAdd_PinnedKeys_AreSkippedAndTheRestCondemned(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	op := newOp(t, c, catalog.OpCreateBranch, "g")
	if err := register(t, c, op.ID, append(pins(v2), catalog.Pin{Kind: catalog.ObjectTree, Key: "g/trees/keep.01A/"})...); err != nil {
		t.Fatalf("register: %v", err)
	}
	run := newRun(t, c, "g", catalog.CleanupSweep)
	skipped := condemn(t, c, run.ID, v1, v2, v3, "g/trees/keep.01A/commits/0001.json", "g/trees/")
	want := []string{v2, "g/trees/keep.01A/commits/0001.json", "g/trees/"}
	if !slices.Equal(skipped, want) {
		t.Errorf("skipped %v, want %v", skipped, want)
	}
	if got := condemnedKeys(t, c, run.ID); !slices.Equal(got, []string{v1, v3}) {
		t.Errorf("condemned %v, want %v", got, []string{v1, v3})
	}
}

func TestCondemnedAdd_PinReleasedAfterRunStarted_IsStillSkipped(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	before := newOp(t, c, catalog.OpCreateBranch, "g")
	during := newOp(t, c, catalog.OpCreateBranch, "g")
	if err := register(t, c, before.ID, pins(v1)...); err != nil {
		t.Fatalf("register: %v", err)
	}
	if err := register(t, c, during.ID, pins(v2)...); err != nil {
		t.Fatalf("register: %v", err)
	}
	// before lets go before the run starts: the run reads its published reference as a root.
	if err := c.PinsRelease(ctxFor(t), catalog.PinsReleaseParams{OpID: before.ID}); err != nil {
		t.Fatalf("release: %v", err)
	}
	run := newRun(t, c, "g", catalog.CleanupSweep)
	// during lets go after the run started, possibly after the run read its roots.
	if _, err := c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{ID: during.ID, Outcome: catalog.OutcomeCreated}); err != nil {
		t.Fatalf("finish: %v", err)
	}
	if held, _ := c.PinsList(ctxFor(t), catalog.PinsListParams{Graph: "g"}); len(held) != 0 {
		t.Errorf("held pins after both released: %+v, want none", held)
	}
	forRun, err := c.PinsList(ctxFor(t), catalog.PinsListParams{Graph: "g", RunID: run.ID})
	if err != nil || len(forRun) != 1 || forRun[0].Key != v2 || forRun[0].ReleasedAt.IsZero() {
		t.Errorf("pins the run must honour %+v, %v; want only %s, released", forRun, err, v2)
	}

	skipped := condemn(t, c, run.ID, v1, v2)
	if !slices.Equal(skipped, []string{v2}) {
		t.Errorf("skipped %v, want [%s]", skipped, v2)
	}
	if got := condemnedKeys(t, c, run.ID); !slices.Equal(got, []string{v1}) {
		t.Errorf("condemned %v, want [%s]", got, v1)
	}

	// Once that run is over, the next one may condemn v2.
	if _, err := c.CleanupRunFinish(ctxFor(t), catalog.CleanupRunFinishParams{ID: run.ID, State: catalog.CleanupDone}); err != nil {
		t.Fatalf("finish run: %v", err)
	}
	next := newRun(t, c, "g", catalog.CleanupSweep)
	if skipped := condemn(t, c, next.ID, v2); len(skipped) != 0 {
		t.Errorf("next run skipped %v, want v2 condemnable", skipped)
	}
}

func TestPinsRegister_DoneOperationOrOtherGraph_IsRefused(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	op := newOp(t, c, catalog.OpCreateBranch, "g")
	if err := c.PinsRegister(ctxFor(t), catalog.PinsRegisterParams{OpID: op.ID, Graph: "h", Pins: pins(v1)}); !errors.Is(err, catalog.ErrInvalid) {
		t.Errorf("pin for another graph: err = %v, want ErrInvalid", err)
	}
	if err := c.PinsRegister(ctxFor(t), catalog.PinsRegisterParams{OpID: "missing", Pins: pins(v1)}); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("pin for a missing operation: err = %v, want ErrNotFound", err)
	}
	if _, err := c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{ID: op.ID, Outcome: catalog.OutcomeCreated}); err != nil {
		t.Fatalf("finish: %v", err)
	}
	if err := register(t, c, op.ID, pins(v1)...); !errors.Is(err, catalog.ErrStateConflict) {
		t.Errorf("pin for a done operation: err = %v, want ErrStateConflict", err)
	}
}

func TestOperationFinish_HeldPins_AreReleased(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	op := newOp(t, c, catalog.OpCreateBranch, "g")
	if err := register(t, c, op.ID, pins(v1, v2)...); err != nil {
		t.Fatalf("register: %v", err)
	}
	if _, err := c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{ID: op.ID, Outcome: catalog.OutcomeUnpublished}); err != nil {
		t.Fatalf("finish: %v", err)
	}
	run := newRun(t, c, "g", catalog.CleanupSweep)
	if skipped := condemn(t, c, run.ID, v1, v2); len(skipped) != 0 {
		t.Errorf("keys of a finished operation skipped as pinned: %v", skipped)
	}
}

// TestPinsHandshake_RacingPinnersAndCondemner_NeverBothNeverNeither races eight operations
// pinning every key, one key at a time, against a sweep condemning the same keys. Whatever
// the interleaving, each key must end up pinned or condemned, never both and never neither.
func TestPinsHandshake_RacingPinnersAndCondemner_NeverBothNeverNeither(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	const pinners, nkeys = 8, 24
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("g/tables/t/versions/K%02d.json", i)
	}
	ops := make([]catalog.Operation, pinners)
	for i := range ops {
		ops[i] = newOp(t, c, catalog.OpCreateBranch, "g")
	}
	run := newRun(t, c, "g", catalog.CleanupSweep)

	shuffled := func() []string {
		s := slices.Clone(keys)
		rand.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
		return s
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		pinnedBy = map[string]int{} // key -> successful registrations
		refused  = map[string]int{} // key -> ErrCondemned refusals
		skipped  []string
		start    = make(chan struct{})
		failures = make(chan error, pinners*nkeys+nkeys)
	)
	for _, op := range ops {
		order := shuffled()
		wg.Go(func() {
			<-start
			for _, k := range order {
				err := c.PinsRegister(ctxFor(t), catalog.PinsRegisterParams{OpID: op.ID, Pins: pins(k)})
				mu.Lock()
				switch {
				case err == nil:
					pinnedBy[k]++
				case errors.Is(err, catalog.ErrCondemned):
					refused[k]++
				default:
					failures <- fmt.Errorf("register %s: %w", k, err)
				}
				mu.Unlock()
			}
		})
	}
	order := shuffled()
	wg.Go(func() {
		<-start
		for _, k := range order {
			res, err := c.CondemnedAdd(ctxFor(t), catalog.CondemnedAddParams{RunID: run.ID,
				Entries: []catalog.Condemned{{Key: k, Kind: catalog.ObjectTableVersion}}})
			if err != nil {
				failures <- fmt.Errorf("condemn %s: %w", k, err)
				continue
			}
			mu.Lock()
			skipped = append(skipped, res.SkippedPinned...)
			mu.Unlock()
		}
	})
	close(start)
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}

	condemned := condemnedKeys(t, c, run.ID)
	stored, err := c.PinsList(ctxFor(t), catalog.PinsListParams{Graph: "g", RunID: run.ID})
	if err != nil {
		t.Fatalf("list pins: %v", err)
	}
	storedPins := map[string]int{}
	for _, p := range stored {
		storedPins[p.Key]++
	}
	// Condemned entries are never removed during the run, so a condemned key refused every
	// pinner, and a key never condemned was pinned by every pinner.
	for _, k := range keys {
		isCondemned := slices.Contains(condemned, k)
		switch {
		case isCondemned && storedPins[k] > 0:
			t.Errorf("%s is both condemned and pinned by %d operation(s)", k, storedPins[k])
		case isCondemned && refused[k] != pinners:
			t.Errorf("%s is condemned but only %d of %d registrations were refused", k, refused[k], pinners)
		case !isCondemned && (pinnedBy[k] != pinners || storedPins[k] != pinners):
			t.Errorf("%s is not condemned but %d registrations succeeded and %d pins are stored, want %d",
				k, pinnedBy[k], storedPins[k], pinners)
		case !isCondemned && !slices.Contains(skipped, k):
			t.Errorf("%s is neither condemned nor reported skipped", k)
		}
	}
	t.Logf("%d keys condemned, %d pinned", len(condemned), nkeys-len(condemned))
}

// TestPinsHoldForLatePut_OutlivesTheFinish_UntilAnOperatorReleasesIt: a commit whose put
// may still land stays pinned after its operation ends — a sweep skips it — and only
// PinsReleaseLatePuts, refused while the operation runs, lets the sweep take it.
func TestPinsHoldForLatePut_OutlivesTheFinish_UntilAnOperatorReleasesIt(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	const commit = "g/commits/01A.json"
	op := newOp(t, c, catalog.OpWriteTable, "g")
	if err := register(t, c, op.ID, pins(v1)...); err != nil {
		t.Fatalf("register: %v", err)
	}
	if err := c.PinsHoldForLatePut(ctxFor(t), catalog.PinsHoldForLatePutParams{OpID: op.ID,
		Pin: catalog.Pin{Kind: catalog.ObjectCommit, Key: commit}}); err != nil {
		t.Fatalf("hold for a late put: %v", err)
	}
	if _, err := c.PinsReleaseLatePuts(ctxFor(t), catalog.PinsReleaseLatePutsParams{OpID: op.ID}); !errors.Is(err, catalog.ErrStateConflict) {
		t.Fatalf("release the late puts of a running operation: %v, want a state conflict", err)
	}
	if _, err := c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{ID: op.ID, Outcome: catalog.OutcomeDone}); err != nil {
		t.Fatalf("finish: %v", err)
	}
	held, err := c.PinsList(ctxFor(t), catalog.PinsListParams{Graph: "g"})
	if err != nil || len(held) != 1 || held[0].Key != commit || !held[0].LatePut || !held[0].ReleasedAt.IsZero() {
		t.Fatalf("pins after the finish: %+v, %v; want the commit alone, held for a late put", held, err)
	}
	run := newRun(t, c, "g", catalog.CleanupSweep)
	if skipped := condemn(t, c, run.ID, commit, v1); !slices.Equal(skipped, []string{commit}) {
		t.Fatalf("sweep skipped %v, want the late-put commit alone", skipped)
	}
	if _, err := c.CleanupRunFinish(ctxFor(t), catalog.CleanupRunFinishParams{ID: run.ID, State: catalog.CleanupAborted}); err != nil {
		t.Fatalf("finish run: %v", err)
	}

	n, err := c.PinsReleaseLatePuts(ctxFor(t), catalog.PinsReleaseLatePutsParams{OpID: op.ID})
	if err != nil || n != 1 {
		t.Fatalf("release the late puts: %d, %v; want 1", n, err)
	}
	if n, err := c.PinsReleaseLatePuts(ctxFor(t), catalog.PinsReleaseLatePutsParams{OpID: op.ID}); err != nil || n != 0 {
		t.Errorf("release again: %d, %v; want 0, nil", n, err)
	}
	if _, err := c.PinsReleaseLatePuts(ctxFor(t), catalog.PinsReleaseLatePutsParams{OpID: catalog.NewID()}); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("release the late puts of an unknown operation: %v, want not found", err)
	}
	again := newRun(t, c, "g", catalog.CleanupSweep)
	if skipped := condemn(t, c, again.ID, commit); len(skipped) != 0 {
		t.Errorf("sweep after the release skipped %v, want nothing pinned", skipped)
	}
}
