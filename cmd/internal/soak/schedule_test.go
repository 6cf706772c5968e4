package soak

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// A seed is its schedule: the same seed and backend give the same schedule, another
// seed or backend another one, and every op kind and fault class appears over a few
// hundred seeds.
func TestGenerate_SameSeedSameSchedule_EveryKindAppears(t *testing.T) {
	kinds, classes := map[OpKind]bool{}, map[FaultClass]bool{}
	for seed := uint64(1); seed <= 300; seed++ {
		a, b := Generate(seed, LocalFS), Generate(seed, LocalFS)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: two schedules:\n%s\n%s", seed, a, b)
		}
		if reflect.DeepEqual(a.Ops, Generate(seed+1000, LocalFS).Ops) {
			t.Fatalf("seeds %d and %d gave the same ops", seed, seed+1000)
		}
		for _, o := range a.Ops {
			kinds[o.Kind] = true
		}
		for _, f := range a.Faults {
			classes[f.Class] = true
		}
	}
	for _, k := range OpKinds {
		if !kinds[k] {
			t.Errorf("no schedule of 300 has a %s", k)
		}
	}
	for _, c := range []FaultClass{ClassStorage, ClassOperator, ClassProcess} {
		if !classes[c] {
			t.Errorf("no schedule of 300 has a %s fault", c)
		}
	}
}

// Keep selects ops and faults by id, drops an operator fault whose victim it dropped, and
// keepArg/ParseKeep round-trip it ("none" keeps nothing).
func TestKeep_SelectsByIDAndDropsOrphanedOperatorFaults(t *testing.T) {
	var s Schedule
	for seed := uint64(1); ; seed++ {
		s = Generate(seed, VersityGW)
		if len(s.Ops) >= 3 && hasOperator(s) {
			break
		}
	}
	var victim string
	for _, f := range s.Faults {
		if f.Class == ClassOperator {
			victim = f.Victim
		}
	}
	keep := map[string]bool{}
	for _, id := range s.IDs() {
		if id != victim {
			keep[id] = true
		}
	}
	k := s.Keep(keep)
	if hasOperator(k) || len(k.Ops) != len(s.Ops)-1 {
		t.Fatalf("dropping %s kept %s", victim, k)
	}
	if got := ParseKeep(keepArg(k)); !reflect.DeepEqual(s.Keep(got), k) {
		t.Fatalf("-keep %s does not reproduce the sub-schedule", keepArg(k))
	}
	none := s.Keep(ParseKeep("none"))
	if len(none.Ops)+len(none.Faults) != 0 || keepArg(none) != "none" {
		t.Fatalf("-keep none kept %s", none)
	}
	if ParseKeep("") != nil || !strings.Contains(s.String(), "seed ") {
		t.Fatal("an empty -keep keeps everything")
	}
}

func hasOperator(s Schedule) bool {
	for _, f := range s.Faults {
		if f.Class == ClassOperator {
			return true
		}
	}
	return false
}

// Two seeds' errors of one kind count as one shape: the graph's name, ids and numbers
// are replaced and only the first line is kept; an error of another kind stays apart.
func TestErrorShape_SeedDifferencesReplaced_LikeErrorsCountTogether(t *testing.T) {
	a := errorShape(errors.New("start workflow graft/create-branch/s12-lo-ab12cd/x: 01JABCDEFGHJKMNPQRSTVWXYZ0 after 3 attempts\ndetail"), "s12-lo-ab12cd")
	b := errorShape(errors.New("start workflow graft/create-branch/s99-lo-ff00aa/x: 01JZZZZZZZZZZZZZZZZZZZZZZ9 after 17 attempts"), "s99-lo-ff00aa")
	if a != b || strings.Contains(a, "detail") || !strings.Contains(a, "<graph>") || !strings.Contains(a, "<id>") {
		t.Fatalf("shapes %q and %q, want one shape with the graph and id replaced", a, b)
	}
	if c := errorShape(errors.New("read ledger: connection reset"), "g"); c == a {
		t.Fatalf("another error has the same shape %q", c)
	}
	if long := errorShape(errors.New(strings.Repeat("x", 500)), "g"); len(long) > 210 {
		t.Fatalf("a long message is not cut: %d bytes", len(long))
	}
}
