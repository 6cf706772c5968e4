package catalog_test

import (
	"context"
	"errors"
	"testing"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

func TestIncarnationSettle_FromAnyUnsettledState_ReportsWhereItCameFrom(t *testing.T) {
	ctx := context.Background()
	c := catalogtest.Open(t)
	for i, from := range []catalog.IncarnationState{catalog.IncarnationIntent, catalog.IncarnationCloned, catalog.IncarnationInDoubt} {
		op := "op-settle-" + string(from)
		if _, err := c.OperationInsert(ctx, catalog.OperationInsertParams{ID: op, Kind: catalog.OpCreateBranch, Graph: "g"}); err != nil {
			t.Fatal(err)
		}
		logical := "b" + string(rune('a'+i))
		native := logical + ".01JAAAAAAAAAAAAAAAAAAAAAAA"
		if _, err := c.IncarnationInsert(ctx, catalog.IncarnationInsertParams{Graph: "g", Logical: logical, Native: native, OpID: op}); err != nil {
			t.Fatal(err)
		}
		if from != catalog.IncarnationIntent {
			if _, err := c.IncarnationSetState(ctx, catalog.IncarnationSetStateParams{Graph: "g", Native: native, From: catalog.IncarnationIntent, To: catalog.IncarnationCloned}); err != nil {
				t.Fatal(err)
			}
		}
		if from == catalog.IncarnationInDoubt {
			if _, err := c.IncarnationSetState(ctx, catalog.IncarnationSetStateParams{Graph: "g", Native: native, From: catalog.IncarnationCloned, To: catalog.IncarnationInDoubt}); err != nil {
				t.Fatal(err)
			}
		}
		res, err := c.IncarnationSettle(ctx, catalog.IncarnationSettleParams{Graph: "g", Native: native, To: catalog.IncarnationLive})
		if err != nil || res.From != from || res.Incarnation.State != catalog.IncarnationLive || res.Incarnation.SettledAt.IsZero() {
			t.Fatalf("settle from %s: %+v, %v", from, res, err)
		}
		again, err := c.IncarnationSettle(ctx, catalog.IncarnationSettleParams{Graph: "g", Native: native, To: catalog.IncarnationLive})
		if err != nil || again.From != catalog.IncarnationLive {
			t.Fatalf("repeated settle: %+v, %v; want unchanged", again, err)
		}
		if _, err := c.IncarnationSettle(ctx, catalog.IncarnationSettleParams{Graph: "g", Native: native, To: catalog.IncarnationUnpublished}); !errors.Is(err, catalog.ErrStateConflict) {
			t.Fatalf("unpublishing a live incarnation: %v, want ErrStateConflict", err)
		}
	}
}
