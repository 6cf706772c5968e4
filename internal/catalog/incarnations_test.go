package catalog_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

// intent witnesses a new incarnation of logical, named native, under a fresh operation.
func intent(t *testing.T, c *catalog.Catalog, logical, native string) catalog.Incarnation {
	t.Helper()
	op := newOp(t, c, catalog.OpCreateBranch, "g")
	inc, err := c.IncarnationInsert(ctxFor(t), catalog.IncarnationInsertParams{
		Graph: "g", Logical: logical, Native: native, OpID: op.ID,
	})
	if err != nil {
		t.Fatalf("insert incarnation %s: %v", native, err)
	}
	return inc
}

func setState(t *testing.T, c *catalog.Catalog, native string, from, to catalog.IncarnationState) catalog.Incarnation {
	t.Helper()
	inc, err := c.IncarnationSetState(ctxFor(t), catalog.IncarnationSetStateParams{Graph: "g", Native: native, From: from, To: to})
	if err != nil {
		t.Fatalf("set %s %s -> %s: %v", native, from, to, err)
	}
	return inc
}

func TestIncarnationInsert_NewLogical_IsIntentWithTreeDefaultingToNative(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	inc := intent(t, c, "feature/x", "feature/x.01A")
	if inc.State != catalog.IncarnationIntent || inc.Tree != "feature/x.01A" || !inc.SettledAt.IsZero() || inc.CreatedAt.IsZero() {
		t.Errorf("new incarnation %+v, want state intent, tree = native, unsettled", inc)
	}
	got, err := c.IncarnationGetByNative(ctxFor(t), catalog.IncarnationGetByNativeParams{Graph: "g", Native: "feature/x.01A"})
	if err != nil || got != inc {
		t.Errorf("get by native = %+v, %v; want %+v", got, err, inc)
	}
}

func TestIncarnationInsert_SecondIntentForSameLogical_IsIncarnationExistsNamingTheFirst(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	first := intent(t, c, "feature/x", "feature/x.01A")
	op := newOp(t, c, catalog.OpCreateBranch, "g")
	_, err := c.IncarnationInsert(ctxFor(t), catalog.IncarnationInsertParams{
		Graph: "g", Logical: "feature/x", Native: "feature/x.01B", OpID: op.ID,
	})
	if !errors.Is(err, catalog.ErrIncarnationExists) || !errors.Is(err, catalog.ErrDuplicate) {
		t.Fatalf("second intent: err = %v, want ErrIncarnationExists and ErrDuplicate", err)
	}
	var exists *catalog.IncarnationExistsError
	if !errors.As(err, &exists) || exists.Existing.Native != first.Native || exists.Existing.OpID != first.OpID {
		t.Errorf("second intent: err = %#v, want it to name %s of operation %s", err, first.Native, first.OpID)
	}
}

func TestIncarnationInsert_OtherGraphSameLogical_IsAllowed(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	intent(t, c, "main", "main.01A")
	op := newOp(t, c, catalog.OpCreateBranch, "h")
	if _, err := c.IncarnationInsert(ctxFor(t), catalog.IncarnationInsertParams{
		Graph: "h", Logical: "main", Native: "main.01B", OpID: op.ID,
	}); err != nil {
		t.Fatalf("intent for main in another graph: %v", err)
	}
}

func TestIncarnationInsert_AfterFirstIsUnpublishedOrRetired_IsAllowed(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	intent(t, c, "feature/x", "feature/x.01A")
	setState(t, c, "feature/x.01A", catalog.IncarnationIntent, catalog.IncarnationUnpublished)
	intent(t, c, "feature/x", "feature/x.01B") // allowed: the first is settled unpublished

	setState(t, c, "feature/x.01B", catalog.IncarnationIntent, catalog.IncarnationLive)
	op := newOp(t, c, catalog.OpCreateBranch, "g")
	_, err := c.IncarnationInsert(ctxFor(t), catalog.IncarnationInsertParams{
		Graph: "g", Logical: "feature/x", Native: "feature/x.01C", OpID: op.ID,
	})
	if !errors.Is(err, catalog.ErrIncarnationExists) {
		t.Fatalf("intent while another is live: err = %v, want ErrIncarnationExists", err)
	}
	setState(t, c, "feature/x.01B", catalog.IncarnationLive, catalog.IncarnationRetired)
	intent(t, c, "feature/x", "feature/x.01C") // allowed: the live one is retired

	all, err := c.IncarnationListByLogical(ctxFor(t), catalog.IncarnationListByLogicalParams{Graph: "g", Logical: "feature/x"})
	if err != nil {
		t.Fatalf("list by logical: %v", err)
	}
	var got []string
	for _, inc := range all {
		got = append(got, fmt.Sprintf("%s:%s", inc.Native, inc.State))
	}
	want := []string{"feature/x.01A:unpublished", "feature/x.01B:retired", "feature/x.01C:intent"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("incarnations oldest first %v, want %v", got, want)
	}
}

func TestIncarnationInsert_RacingIntentsForOneLogical_ExactlyOneWins(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	const racers = 12
	ops := make([]catalog.Operation, racers)
	for i := range ops {
		ops[i] = newOp(t, c, catalog.OpCreateBranch, "g")
	}
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		wg.Go(func() {
			_, errs[i] = c.IncarnationInsert(ctxFor(t), catalog.IncarnationInsertParams{
				Graph: "g", Logical: "hot", Native: fmt.Sprintf("hot.%02d", i), OpID: ops[i].ID,
			})
		})
	}
	wg.Wait()
	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, catalog.ErrIncarnationExists):
			t.Errorf("racer %d: err = %v, want nil or ErrIncarnationExists", i, err)
		}
	}
	if wins != 1 {
		t.Errorf("%d racers won, want exactly 1", wins)
	}
}

func TestIncarnationInsert_RepeatedBySameOperation_ReturnsTheExistingRow(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	first := intent(t, c, "feature/x", "feature/x.01A")
	setState(t, c, first.Native, catalog.IncarnationIntent, catalog.IncarnationCloned)
	again, err := c.IncarnationInsert(ctxFor(t), catalog.IncarnationInsertParams{
		Graph: "g", Logical: "feature/x", Native: "feature/x.01A", OpID: first.OpID,
	})
	if err != nil || again.State != catalog.IncarnationCloned || again.CreatedAt != first.CreatedAt {
		t.Errorf("repeated insert = %+v, %v; want the existing cloned row", again, err)
	}
}

func TestIncarnationInsert_SameNativeOtherOperation_IsDuplicate(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	intent(t, c, "feature/x", "feature/x.01A")
	other := newOp(t, c, catalog.OpCreateBranch, "g")
	_, err := c.IncarnationInsert(ctxFor(t), catalog.IncarnationInsertParams{
		Graph: "g", Logical: "feature/x", Native: "feature/x.01A", OpID: other.ID,
	})
	if !errors.Is(err, catalog.ErrDuplicate) || errors.Is(err, catalog.ErrIncarnationExists) {
		t.Errorf("same native, other operation: err = %v, want plain ErrDuplicate", err)
	}
}

func TestIncarnationInsert_UnknownOperation_IsNotFound(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	_, err := c.IncarnationInsert(ctxFor(t), catalog.IncarnationInsertParams{
		Graph: "g", Logical: "x", Native: "x.01A", OpID: "no-such-operation",
	})
	if !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("insert with unknown operation: err = %v, want ErrNotFound", err)
	}
}

func TestIncarnationInsertTx_ConflictInCallersTransaction_LeavesItUsable(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	intent(t, c, "feature/x", "feature/x.01A")
	op := newOp(t, c, catalog.OpCreateBranch, "g")
	err := c.InTx(ctxFor(t), func(tx pgx.Tx) error {
		_, err := c.IncarnationInsertTx(ctxFor(t), tx, catalog.IncarnationInsertParams{
			Graph: "g", Logical: "feature/x", Native: "feature/x.01B", OpID: op.ID,
		})
		if !errors.Is(err, catalog.ErrIncarnationExists) {
			return fmt.Errorf("conflicting insert: err = %v, want ErrIncarnationExists", err)
		}
		_, err = c.IncarnationInsertTx(ctxFor(t), tx, catalog.IncarnationInsertParams{
			Graph: "g", Logical: "feature/y", Native: "feature/y.01B", OpID: op.ID,
		})
		return err
	})
	if err != nil {
		t.Fatalf("transaction: %v", err)
	}
	if _, err := c.IncarnationGetByNative(ctxFor(t), catalog.IncarnationGetByNativeParams{Graph: "g", Native: "feature/y.01B"}); err != nil {
		t.Errorf("insert after the conflict did not commit: %v", err)
	}
}

func TestIncarnationSetState_FromExpectedState_MovesAndStampsSettlement(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	inc := intent(t, c, "b", "b.01A")
	cloned := setState(t, c, inc.Native, catalog.IncarnationIntent, catalog.IncarnationCloned)
	if cloned.State != catalog.IncarnationCloned || !cloned.SettledAt.IsZero() {
		t.Errorf("after clone %+v, want cloned and unsettled", cloned)
	}
	doubt := setState(t, c, inc.Native, catalog.IncarnationCloned, catalog.IncarnationInDoubt)
	if !doubt.SettledAt.IsZero() {
		t.Errorf("in_doubt incarnation has SettledAt %s", doubt.SettledAt)
	}
	live := setState(t, c, inc.Native, catalog.IncarnationInDoubt, catalog.IncarnationLive)
	if live.State != catalog.IncarnationLive || live.SettledAt.IsZero() {
		t.Errorf("after settle %+v, want live with SettledAt", live)
	}
	retired := setState(t, c, inc.Native, catalog.IncarnationLive, catalog.IncarnationRetired)
	if !retired.SettledAt.Equal(live.SettledAt) {
		t.Errorf("retiring moved SettledAt from %s to %s, want the first settlement kept", live.SettledAt, retired.SettledAt)
	}
}

func TestIncarnationSetState_FromWrongState_IsStateConflictWithCurrentState(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	inc := intent(t, c, "b", "b.01A")
	setState(t, c, inc.Native, catalog.IncarnationIntent, catalog.IncarnationCloned)
	_, err := c.IncarnationSetState(ctxFor(t), catalog.IncarnationSetStateParams{
		Graph: "g", Native: inc.Native, From: catalog.IncarnationInDoubt, To: catalog.IncarnationLive,
	})
	var conflict *catalog.StateConflictError
	if !errors.Is(err, catalog.ErrStateConflict) || !errors.As(err, &conflict) || conflict.Current != "cloned" {
		t.Fatalf("in_doubt -> live on a cloned incarnation: err = %v, want StateConflictError with current cloned", err)
	}
	got, _ := c.IncarnationGetByNative(ctxFor(t), catalog.IncarnationGetByNativeParams{Graph: "g", Native: inc.Native})
	if got.State != catalog.IncarnationCloned {
		t.Errorf("state after refused move %s, want cloned", got.State)
	}
}

func TestIncarnationSetState_AlreadyInTargetState_ReturnsItUnchanged(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	inc := intent(t, c, "b", "b.01A")
	first := setState(t, c, inc.Native, catalog.IncarnationIntent, catalog.IncarnationCloned)
	again := setState(t, c, inc.Native, catalog.IncarnationIntent, catalog.IncarnationCloned)
	if again != first {
		t.Errorf("repeated move returned %+v, want the unchanged %+v", again, first)
	}
}

func TestIncarnationSetState_IllegalMoveOrMissingRow_IsInvalidOrNotFound(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	inc := intent(t, c, "b", "b.01A")
	for _, move := range [][2]catalog.IncarnationState{
		{catalog.IncarnationUnpublished, catalog.IncarnationLive},
		{catalog.IncarnationLive, catalog.IncarnationIntent},
		{catalog.IncarnationRetired, catalog.IncarnationLive},
		{catalog.IncarnationIntent, catalog.IncarnationRetired},
	} {
		_, err := c.IncarnationSetState(ctxFor(t), catalog.IncarnationSetStateParams{Graph: "g", Native: inc.Native, From: move[0], To: move[1]})
		if !errors.Is(err, catalog.ErrInvalid) {
			t.Errorf("%s -> %s: err = %v, want ErrInvalid", move[0], move[1], err)
		}
	}
	_, err := c.IncarnationSetState(ctxFor(t), catalog.IncarnationSetStateParams{
		Graph: "g", Native: "missing.01A", From: catalog.IncarnationIntent, To: catalog.IncarnationCloned,
	})
	if !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("move of a missing incarnation: err = %v, want ErrNotFound", err)
	}
}

func TestIncarnationListByGraph_StateFilter_ReturnsOnlyThoseStates(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	intent(t, c, "a", "a.01A")
	intent(t, c, "b", "b.01A")
	setState(t, c, "b.01A", catalog.IncarnationIntent, catalog.IncarnationInDoubt)
	intent(t, c, "c", "c.01A")
	setState(t, c, "c.01A", catalog.IncarnationIntent, catalog.IncarnationUnpublished)

	unsettled, err := c.IncarnationListByGraph(ctxFor(t), catalog.IncarnationListByGraphParams{
		Graph: "g", States: []catalog.IncarnationState{catalog.IncarnationIntent, catalog.IncarnationInDoubt},
	})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(unsettled) != 2 || unsettled[0].Native != "a.01A" || unsettled[1].Native != "b.01A" {
		t.Errorf("unsettled incarnations %+v, want a.01A and b.01A", unsettled)
	}
	all, err := c.IncarnationListByGraph(ctxFor(t), catalog.IncarnationListByGraphParams{Graph: "g"})
	if err != nil || len(all) != 3 {
		t.Errorf("all incarnations: %d, %v; want 3", len(all), err)
	}
}

func TestIncarnationOpen_IsTheOneLiveOrUnsettledIncarnation_NotFoundWhenAllSettledDead(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	open := func() (catalog.Incarnation, error) {
		return c.IncarnationOpen(ctxFor(t), catalog.IncarnationOpenParams{Graph: "g", Logical: "f"})
	}
	if _, err := open(); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("no incarnation: %v, want ErrNotFound", err)
	}
	intent(t, c, "f", "f.01A")
	setState(t, c, "f.01A", catalog.IncarnationIntent, catalog.IncarnationLive)
	setState(t, c, "f.01A", catalog.IncarnationLive, catalog.IncarnationRetired)
	intent(t, c, "f", "f.01B")
	setState(t, c, "f.01B", catalog.IncarnationIntent, catalog.IncarnationUnpublished)
	intent(t, c, "f/child", "f/child.01C") // another name
	if _, err := open(); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("only retired and unpublished incarnations: %v, want ErrNotFound", err)
	}
	intent(t, c, "f", "f.01D")
	for _, to := range []catalog.IncarnationState{catalog.IncarnationIntent, catalog.IncarnationCloned, catalog.IncarnationInDoubt, catalog.IncarnationLive} {
		if to != catalog.IncarnationIntent {
			from := map[catalog.IncarnationState]catalog.IncarnationState{
				catalog.IncarnationCloned: catalog.IncarnationIntent, catalog.IncarnationInDoubt: catalog.IncarnationCloned, catalog.IncarnationLive: catalog.IncarnationInDoubt}[to]
			setState(t, c, "f.01D", from, to)
		}
		inc, err := open()
		if err != nil || inc.Native != "f.01D" || inc.State != to {
			t.Fatalf("open incarnation %+v, %v; want f.01D in %s", inc, err, to)
		}
	}
	if inc, err := c.IncarnationOpen(ctxFor(t), catalog.IncarnationOpenParams{Graph: "other", Logical: "f"}); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("another graph: %+v, %v; want ErrNotFound", inc, err)
	}
}

func TestIncarnationListByNatives_ReturnsTheKnownOnesInNativeOrder(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	intent(t, c, "f", "f.01B")
	setState(t, c, "f.01B", catalog.IncarnationIntent, catalog.IncarnationLive)
	setState(t, c, "f.01B", catalog.IncarnationLive, catalog.IncarnationRetired)
	intent(t, c, "f", "f.01A")
	got, err := c.IncarnationListByNatives(ctxFor(t), catalog.IncarnationListByNativesParams{Graph: "g", Natives: []string{"f.01B", "f.01Z", "f.01A"}})
	if err != nil || len(got) != 2 || got[0].Native != "f.01A" || got[0].State != catalog.IncarnationIntent ||
		got[1].Native != "f.01B" || got[1].State != catalog.IncarnationRetired {
		t.Fatalf("list by natives = %+v, %v; want f.01A intent and f.01B retired", got, err)
	}
	if got, err := c.IncarnationListByNatives(ctxFor(t), catalog.IncarnationListByNativesParams{Graph: "g"}); err != nil || len(got) != 0 {
		t.Fatalf("no natives: %+v, %v; want none", got, err)
	}
	if got, err := c.IncarnationListByNatives(ctxFor(t), catalog.IncarnationListByNativesParams{Graph: "other", Natives: []string{"f.01A"}}); err != nil || len(got) != 0 {
		t.Fatalf("another graph: %+v, %v; want none", got, err)
	}
}
