package main

import (
	"context"
	"strings"
	"testing"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/workflows"
)

// graft graph upgrade on a format-1 graph made by graft graph init --format 1: the graph record
// and main's ref become format 2; repeating it is done with the same refs; a missing
// graph is not_found (6).
func TestGraphUpgrade_InProcess_UpgradesThenRepeatsIdempotently(t *testing.T) {
	p := newInProcess(t)
	const g = "upg"
	wantCode(t, p.run(t, "graph", "init", g, "--format", "1"), 0)
	if _, v, err := graph.ReadGraphAny(context.Background(), p.store, g); err != nil || v != format.Version {
		t.Fatalf("graph after init: format %d, %v; want format 1 (this test upgrades it)", v, err)
	}
	r := p.run(t, "graph", "upgrade", g, "-o", "json")
	wantCode(t, r, 0)
	first := jsonOut[workflows.UpgradeGraphResult](t, r)
	if first.Outcome != "done" || !first.GraphRecord || len(first.Refs) != 1 {
		t.Fatalf("upgrade = %+v; want done with the graph record and main's ref", first)
	}
	if _, v, err := graph.ReadGraphAny(context.Background(), p.store, g); err != nil || v != format.Version2 {
		t.Fatalf("graph after the upgrade: format %d, %v; want 2", v, err)
	}
	r = p.run(t, "graph", "upgrade", g)
	wantCode(t, r, 0)
	for _, want := range []string{"upgraded graph " + g, first.Refs[0], first.OpID} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("second upgrade's output lacks %q:\n%s", want, r.stdout)
		}
	}
	wantText(t, p.run(t, "graph", "upgrade", "missing"), 6, "not_found", "does not exist")
}
