package catalog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

// holdTx runs fn in a ledger transaction and keeps that transaction open
// until release is called; held returns once fn has run. The transaction
// then commits.
func holdTx(t *testing.T, c *catalog.Catalog, fn func(tx pgx.Tx) error) (release func() error) {
	t.Helper()
	held, done := make(chan error, 1), make(chan error, 1)
	releaseC := make(chan struct{})
	go func() {
		done <- c.InTx(ctxFor(t), func(tx pgx.Tx) error {
			err := fn(tx)
			held <- err
			if err != nil {
				return err
			}
			<-releaseC
			return nil
		})
	}()
	if err := <-held; err != nil {
		t.Fatalf("open transaction: %v", err)
	}
	return func() error { close(releaseC); return <-done }
}

// waitForLockWaiter waits until some session waits for the advisory lock of
// key (the text hashed into it, without the schema), proving the call that
// session runs is blocked by the lock rather than merely slow.
func waitForLockWaiter(t *testing.T, c *catalog.Catalog, prefix, key string) {
	t.Helper()
	conn, err := pgx.Connect(ctxFor(t), catalogtest.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		var waiters int
		err := conn.QueryRow(ctxFor(t), `
			SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
			  AND ((classid::bigint << 32) | objid::bigint) = hashtextextended($1 || $2 || '/' || $3, 0)`,
			prefix, c.Schema(), key).Scan(&waiters)
		if err != nil {
			t.Fatal(err)
		}
		if waiters > 0 {
			return
		}
		if ctxFor(t).Err() != nil {
			t.Fatalf("no session waits for the lock of %s", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPinsRegister_OtherOperationsOfTheGraph_DoNotWaitForAnOpenRegistration
// proves operations of one graph do not serialise on the graph's lock: while
// one operation's pin registration is uncommitted, another operation of the
// same graph registers pins, finishes and releases them.
func TestPinsRegister_OtherOperationsOfTheGraph_DoNotWaitForAnOpenRegistration(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	a, b := newOp(t, c, catalog.OpCreateBranch, "g"), newOp(t, c, catalog.OpCreateBranch, "g")
	release := holdTx(t, c, func(tx pgx.Tx) error {
		return c.PinsRegisterTx(ctxFor(t), tx, catalog.PinsRegisterParams{OpID: a.ID, Pins: pins("g/k1")})
	})
	// Were the lock exclusive, these would wait for the open transaction,
	// which waits for them: the test would never end.
	if err := c.PinsRegister(ctxFor(t), catalog.PinsRegisterParams{OpID: b.ID, Pins: pins("g/k1", "g/k2")}); err != nil {
		t.Fatalf("register b's pins beside a's open registration: %v", err)
	}
	if _, err := c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{ID: b.ID, Outcome: catalog.OutcomeCreated}); err != nil {
		t.Fatalf("finish b beside a's open registration: %v", err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	held, err := c.PinsList(ctxFor(t), catalog.PinsListParams{Graph: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held[0].OpID != a.ID || held[0].Key != "g/k1" {
		t.Fatalf("held pins %+v, want only a's g/k1", held)
	}
}

// TestCondemnedAdd_WaitsForAnOpenPinRegistration_ThenSkipsThePin proves the
// handshake still excludes: a condemnation of a key whose pin registration is
// uncommitted waits for it, then sees the pin and skips the key.
func TestCondemnedAdd_WaitsForAnOpenPinRegistration_ThenSkipsThePin(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	op := newOp(t, c, catalog.OpCreateBranch, "g")
	run := newRun(t, c, "g", catalog.CleanupSweep)
	release := holdTx(t, c, func(tx pgx.Tx) error {
		return c.PinsRegisterTx(ctxFor(t), tx, catalog.PinsRegisterParams{OpID: op.ID, Pins: pins("g/k1")})
	})
	skipped := make(chan []string, 1)
	go func() { skipped <- condemn(t, c, run.ID, "g/k1", "g/k2") }()
	waitForLockWaiter(t, c, "graft/graph/", "g")
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if got := <-skipped; len(got) != 1 || got[0] != "g/k1" {
		t.Fatalf("skipped %v, want [g/k1]: the pin committed before the condemnation could run", got)
	}
	if got := condemnedKeys(t, c, run.ID); len(got) != 1 || got[0] != "g/k2" {
		t.Fatalf("condemned %v, want [g/k2]", got)
	}
}

// TestPinsRegister_WaitsForAnOpenCondemnation_ThenIsRefused is the other
// order: a pin registration waits for an uncommitted condemnation of its key,
// then is refused with ErrCondemned.
func TestPinsRegister_WaitsForAnOpenCondemnation_ThenIsRefused(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	op := newOp(t, c, catalog.OpCreateBranch, "g")
	run := newRun(t, c, "g", catalog.CleanupSweep)
	release := holdTx(t, c, func(tx pgx.Tx) error {
		// CondemnedAdd has no Tx twin; hold the exclusive lock the way it
		// does, and condemn through the catalog once it is released.
		_, err := tx.Exec(ctxFor(t), `SELECT pg_advisory_xact_lock(hashtextextended('graft/graph/' || current_schema() || '/' || 'g', 0))`)
		return err
	})
	registered := make(chan error, 1)
	go func() {
		registered <- c.PinsRegister(ctxFor(t), catalog.PinsRegisterParams{OpID: op.ID, Pins: pins("g/k1")})
	}()
	waitForLockWaiter(t, c, "graft/graph/", "g")
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := <-registered; err != nil {
		t.Fatalf("register after the exclusive holder committed: %v", err)
	}
	if got := condemn(t, c, run.ID, "g/k1"); len(got) != 1 {
		t.Fatalf("skipped %v, want the pinned g/k1", got)
	}
}

// TestIncarnationInsertDisjoint_OnlyNamesSharingAFirstSegmentWait proves the
// prefix-disjointness check locks per first name segment: while a create of
// `a/x` is uncommitted, a create of `b` goes through, and a create of `a`
// waits for it and is then refused with the clash.
func TestIncarnationInsertDisjoint_OnlyNamesSharingAFirstSegmentWait(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	insert := func(tx pgx.Tx, logical, native string) error {
		op := newOp(t, c, catalog.OpCreateBranch, "g")
		_, err := c.IncarnationInsertDisjointTx(ctxFor(t), tx, catalog.IncarnationInsertParams{Graph: "g", Logical: logical, Native: native, OpID: op.ID})
		return err
	}
	release := holdTx(t, c, func(tx pgx.Tx) error { return insert(tx, "a/x", "a/x.N1") })
	if err := c.InTx(ctxFor(t), func(tx pgx.Tx) error { return insert(tx, "b", "b.N2") }); err != nil {
		t.Fatalf("create b beside an open create of a/x: %v", err)
	}
	clash := make(chan error, 1)
	go func() { clash <- c.InTx(ctxFor(t), func(tx pgx.Tx) error { return insert(tx, "a", "a.N3") }) }()
	waitForLockWaiter(t, c, "graft/name/", "g/a")
	if err := release(); err != nil {
		t.Fatal(err)
	}
	var exists *catalog.IncarnationExistsError
	if err := <-clash; !errors.As(err, &exists) || exists.Existing.Logical != "a/x" {
		t.Fatalf("create of a after a/x committed: %v, want IncarnationExistsError naming a/x", err)
	}
}

// TestOperationFinish_NoCleanupRunning_DeletesItsPinsAndPrunesOthers proves
// the release path's shortcut keeps the ledger's end state: with no cleanup
// run of the graph running, a finished operation's pins are gone at once (no
// released rows left for a pruning pass), and a pin released while a run was
// running stays until a release after that run finished prunes it.
func TestOperationFinish_NoCleanupRunning_DeletesItsPinsAndPrunesOthers(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	rows := func() int {
		t.Helper()
		conn, err := pgx.Connect(ctxFor(t), catalogtest.DatabaseURL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var n int
		if err := conn.QueryRow(ctxFor(t), `SELECT count(*) FROM `+pgx.Identifier{c.Schema(), "op_pins"}.Sanitize()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b, d := newOp(t, c, catalog.OpCreateBranch, "g"), newOp(t, c, catalog.OpCreateBranch, "g"), newOp(t, c, catalog.OpCreateBranch, "g")
	for _, op := range []catalog.Operation{a, b, d} {
		if err := c.PinsRegister(ctxFor(t), catalog.PinsRegisterParams{OpID: op.ID, Pins: pins("g/k1", "g/k2")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{ID: a.ID, Outcome: catalog.OutcomeCreated}); err != nil {
		t.Fatal(err)
	}
	if n := rows(); n != 4 {
		t.Fatalf("%d pin rows after a finished with no cleanup running, want b's and d's 4", n)
	}
	run := newRun(t, c, "g", catalog.CleanupSweep)
	if _, err := c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{ID: b.ID, Outcome: catalog.OutcomeCreated}); err != nil {
		t.Fatal(err)
	}
	if got := condemn(t, c, run.ID, "g/k1"); len(got) != 1 {
		t.Fatalf("skipped %v: b's pin, released while the run runs, must still protect g/k1", got)
	}
	if n := rows(); n != 4 {
		t.Fatalf("%d pin rows, want d's 2 and b's 2 released ones kept for the running run", n)
	}
	if _, err := c.CleanupRunFinish(ctxFor(t), catalog.CleanupRunFinishParams{ID: run.ID, State: catalog.CleanupDone}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.OperationFinish(ctxFor(t), catalog.OperationFinishParams{ID: d.ID, Outcome: catalog.OutcomeCreated}); err != nil {
		t.Fatal(err)
	}
	if n := rows(); n != 0 {
		t.Fatalf("%d pin rows after every operation finished and the run ended, want 0", n)
	}
}

// TestIncarnationInsertDisjoint_RefusalTakesBackTheInsertAndLeavesTheTransactionUsable
// proves the disjoint insert's answers, each made in one round trip: a name under an
// open one's prefix, and a second open incarnation of a name, are refused with the
// open one named, insert nothing, and leave the caller's transaction usable (a create
// whose name is held commits its operation and pins); a repeated insert returns the
// row; a native name taken by another operation is ErrDuplicate.
func TestIncarnationInsertDisjoint_RefusalTakesBackTheInsertAndLeavesTheTransactionUsable(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	ctx := ctxFor(t)
	op := newOp(t, c, catalog.OpCreateBranch, "g")
	insert := func(tx pgx.Tx, logical, native, opID string) error {
		_, err := c.IncarnationInsertDisjointTx(ctx, tx, catalog.IncarnationInsertParams{Graph: "g", Logical: logical, Native: native, OpID: opID})
		return err
	}
	if err := c.InTx(ctx, func(tx pgx.Tx) error { return insert(tx, "a", "a.N1", op.ID) }); err != nil {
		t.Fatal(err)
	}
	for _, refused := range []struct{ logical, native string }{{"a/b", "a/b.N2"}, {"a", "a.N3"}} {
		other := newOp(t, c, catalog.OpCreateBranch, "g")
		next := "c" + refused.native[len(refused.native)-1:]
		err := c.InTx(ctx, func(tx pgx.Tx) error {
			var exists *catalog.IncarnationExistsError
			if err := insert(tx, refused.logical, refused.native, other.ID); !errors.As(err, &exists) || exists.Existing.Native != "a.N1" {
				t.Errorf("insert of %s beside the open a: %v, want IncarnationExistsError naming a.N1", refused.logical, err)
			}
			return insert(tx, next, next+".N", other.ID) // the transaction goes on
		})
		if err != nil {
			t.Fatalf("the transaction after the refusal of %s: %v", refused.logical, err)
		}
		if _, err := c.IncarnationGetByNative(ctx, catalog.IncarnationGetByNativeParams{Graph: "g", Native: refused.native}); !errors.Is(err, catalog.ErrNotFound) {
			t.Errorf("refused %s: get = %v, want ErrNotFound", refused.native, err)
		}
		if _, err := c.IncarnationGetByNative(ctx, catalog.IncarnationGetByNativeParams{Graph: "g", Native: next + ".N"}); err != nil {
			t.Errorf("%s, inserted after the refusal: %v", next, err)
		}
	}
	if err := c.InTx(ctx, func(tx pgx.Tx) error { return insert(tx, "a", "a.N1", op.ID) }); err != nil {
		t.Errorf("the same insert again: %v, want the row", err)
	}
	other := newOp(t, c, catalog.OpCreateBranch, "g")
	if err := c.InTx(ctx, func(tx pgx.Tx) error { return insert(tx, "a", "a.N1", other.ID) }); !errors.Is(err, catalog.ErrDuplicate) {
		t.Errorf("a.N1 again for another operation: %v, want ErrDuplicate", err)
	}
}
