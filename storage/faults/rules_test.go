package faults_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/localfs"
)

// openLocal is the backend for tests of the wrapper's own bookkeeping,
// which does not depend on the store behind it.
func openLocal(t *testing.T) storage.Store { return openLocalFS(t) }

// faultsOf returns the fault each recorded request got.
func faultsOf(w *faults.Store) []faults.Mode {
	var out []faults.Mode
	for _, r := range w.Requests() {
		out = append(out, r.Fault)
	}
	return out
}

const (
	none = faults.None
	fbs  = faults.FailBeforeSend
)

func TestRule_SkipAndTimes_FaultOnlyTheirTurn(t *testing.T) {
	w := faults.Wrap(openLocal(t))
	// The 3rd and 4th matching puts.
	w.Add(faults.Rule{Op: faults.OpPut, Mode: faults.FailBeforeSend, Skip: 2, Times: 2})
	for i := range 6 {
		putIfAbsent(w, fmt.Sprintf("k/%d", i), "x")
	}
	if got, want := faultsOf(w), []faults.Mode{none, none, fbs, fbs, none, none}; !reflect.DeepEqual(got, want) {
		t.Fatalf("faults = %v, want %v", got, want)
	}
}

func TestRule_EverySelectionField_MustMatch(t *testing.T) {
	w := faults.Wrap(openLocal(t))
	ctx := context.Background()
	w.Add(faults.Rule{
		Op:        faults.OpPut,
		KeyPrefix: "g/refs/",
		KeyGlob:   "g/refs/*/*.json",
		Match:     func(op faults.Op, key string) bool { return !strings.Contains(key, "keep") },
		Mode:      faults.FailBeforeSend,
	})
	putIfAbsent(w, "g/refs/branches/a.json", "x")    // all match
	putIfAbsent(w, "g/refs/branches/keep.json", "x") // predicate says no
	putIfAbsent(w, "g/refs/a.json", "x")             // glob: one segment short
	putIfAbsent(w, "g/data/branches/a.json", "x")    // prefix
	w.Head(ctx, "g/refs/branches/a.json")            // op
	if got, want := faultsOf(w), []faults.Mode{fbs, none, none, none, none}; !reflect.DeepEqual(got, want) {
		t.Fatalf("faults = %v, want %v", got, want)
	}
}

func TestRule_EarlierRuleWins_LaterTurnIsNotCarried(t *testing.T) {
	w := faults.Wrap(openLocal(t))
	w.Add(faults.Rule{Name: "first", Op: faults.OpPut, Mode: faults.FailBeforeSend, Times: 1})
	w.Add(faults.Rule{Name: "second", Op: faults.OpPut, Mode: faults.Refuse, Status: 403, Times: 1})
	for i := range 3 {
		putIfAbsent(w, fmt.Sprintf("k/%d", i), "x")
	}
	if got, want := faultsOf(w), []faults.Mode{fbs, none, none}; !reflect.DeepEqual(got, want) {
		t.Fatalf("faults = %v, want %v: the second rule's turn was the first put", got, want)
	}
	if r := w.Requests()[0]; r.Rule != "first" {
		t.Fatalf("first put faulted by %q, want \"first\"", r.Rule)
	}
}

func TestRule_Removed_StopsFaulting(t *testing.T) {
	w := faults.Wrap(openLocal(t))
	remove := w.Add(faults.Rule{Mode: faults.FailBeforeSend})
	putIfAbsent(w, "k/1", "x")
	remove()
	remove() // removing twice does nothing
	putIfAbsent(w, "k/2", "x")
	if got, want := faultsOf(w), []faults.Mode{fbs, none}; !reflect.DeepEqual(got, want) {
		t.Fatalf("faults = %v, want %v", got, want)
	}
}

func TestHoldRule_WithoutOp_HoldsOnlyPuts(t *testing.T) {
	w := faults.Wrap(openLocal(t))
	ctx := context.Background()
	w.Add(faults.Rule{Mode: faults.Hold})
	if _, err := w.Head(ctx, "k/1"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("head: err = %v, want ErrNotFound from the store", err)
	}
	if err := w.Delete(ctx, "k/1"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := putIfAbsent(w, "k/1", "x"); !errors.Is(err, storage.ErrAmbiguous) {
		t.Fatalf("put: err = %v, want ErrAmbiguous", err)
	}
	if got, want := faultsOf(w), []faults.Mode{none, none, faults.Hold}; !reflect.DeepEqual(got, want) {
		t.Fatalf("faults = %v, want %v", got, want)
	}
}

func TestDeleteBatch_SelectedWhenAnyKeyMatches(t *testing.T) {
	inner := openLocal(t)
	w := faults.Wrap(inner)
	ctx := context.Background()
	putIfAbsent(inner, "g/data/1", "x")
	w.Add(faults.Rule{Name: "no-ref-deletes", KeyPrefix: "g/refs/", Mode: faults.Refuse, Status: 403})

	err := w.DeleteBatch(ctx, []string{"g/data/1", "g/refs/a.json"})
	requireInjected(t, err, faults.OpDeleteBatch, "", storage.CodeRefused, 403, "no-ref-deletes")
	requireBody(t, inner, "g/data/1", "x")
	if err := w.DeleteBatch(ctx, []string{"g/data/1"}); err != nil {
		t.Fatalf("batch without a ref key: %v", err)
	}
	requireAbsent(t, inner, "g/data/1")
}

func TestRefuse404_OnRead_IsNotFound(t *testing.T) {
	inner := openLocal(t)
	w := faults.Wrap(inner)
	putIfAbsent(inner, "k/1", "x")
	w.Add(faults.Rule{Name: "vanish", Mode: faults.Refuse, Status: 404})
	_, err := w.Get(context.Background(), "k/1")
	requireInjected(t, err, faults.OpGet, "k/1", storage.CodeNotFound, 404, "vanish")
	_, err = putIfAbsent(w, "k/2", "x")
	requireInjected(t, err, faults.OpPut, "k/2", storage.CodeRefused, 404, "vanish")
}

func TestInvalidRequest_NeitherFaultedNorCounted(t *testing.T) {
	w := faults.Wrap(openLocal(t))
	ctx := context.Background()
	w.Add(faults.Rule{Mode: faults.FailBeforeSend})
	_, err := w.Get(ctx, "/abs")
	if se, ok := errors.AsType[*storage.Error](err); !ok || se.Code != storage.CodeInvalidKey || se.Op != "get" {
		t.Fatalf("get: err = %v, want ErrInvalidKey of op get", err)
	}
	_, err = w.Put(ctx, "k", nil, storage.PutOptions{IfNoneMatch: true, IfMatch: `"e"`})
	if !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("put with both conditions: err = %v, want ErrInvalidArgument", err)
	}
	if _, err := w.List(ctx, storage.ListOptions{Limit: 1001}); !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("list: err = %v, want ErrInvalidArgument", err)
	}
	if err := w.DeleteBatch(ctx, make([]string, storage.MaxBatchDelete+1)); !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("delete batch: err = %v, want ErrInvalidArgument", err)
	}
	if n := len(w.Requests()); n != 0 {
		t.Fatalf("%d requests recorded, want 0", n)
	}
}

func TestAdd_MeaninglessRule_Panics(t *testing.T) {
	for name, r := range map[string]faults.Rule{
		"no mode":             {},
		"refuse without code": {Mode: faults.Refuse},
		"refuse with 200":     {Mode: faults.Refuse, Status: 200},
		"hold on get":         {Mode: faults.Hold, Op: faults.OpGet},
		"delay without delay": {Mode: faults.Delay},
		"bad glob":            {Mode: faults.FailBeforeSend, KeyGlob: "["},
		"unknown op":          {Mode: faults.FailBeforeSend, Op: "copy"},
		"negative times":      {Mode: faults.FailBeforeSend, Times: -1},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatalf("Add(%+v) did not panic", r)
				}
			}()
			faults.Wrap(openLocal(t)).Add(r)
		})
	}
}

func TestSeeded_MeaninglessProbabilities_Panic(t *testing.T) {
	for name, p := range map[string]faults.Probabilities{
		"sum above one":    {FailBeforeSend: 0.6, Refuse: map[int]float64{503: 0.6}},
		"negative":         {Hold: -0.1},
		"status below 400": {Refuse: map[int]float64{200: 0.1}},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatalf("Seeded(%+v) did not panic", p)
				}
			}()
			faults.Seeded(1, p)
		})
	}
}

// The seeded choice for a request depends on its key and how often that
// key was seen, not on the requests to other keys around it.
func TestSeeded_SameSeed_SameFaultsPerKeyWhateverTheInterleaving(t *testing.T) {
	perKey := func(keys []string) map[string][]faults.Mode {
		w := faults.Wrap(openLocal(t))
		w.Add(faults.Seeded(42, faults.Probabilities{FailBeforeSend: 0.3, Refuse: map[int]float64{503: 0.3}}))
		for _, k := range keys {
			w.Head(context.Background(), k)
		}
		out := map[string][]faults.Mode{}
		for _, r := range w.Requests() {
			out[r.Key] = append(out[r.Key], r.Fault)
		}
		return out
	}
	var forward, interleaved []string
	for _, k := range []string{"a/1", "a/2", "a/3"} {
		for range 10 {
			forward = append(forward, k)
		}
	}
	for range 10 {
		interleaved = append(interleaved, "a/3", "a/1", "a/2")
	}
	a, b := perKey(forward), perKey(interleaved)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("per-key faults differ with the interleaving:\n%v\n%v", a, b)
	}
}

func TestSeeded_HoldAndDelay_ApplyAsChosen(t *testing.T) {
	w := faults.Wrap(openLocal(t))
	const d = 20 * time.Millisecond
	w.Add(faults.Seeded(3, faults.Probabilities{Hold: 0.5, Delay: 0.5, DelayFor: d}))
	for i := range 20 {
		start := time.Now()
		_, err := putIfAbsent(w, fmt.Sprintf("k/%d", i), "x")
		took := time.Since(start)
		switch f := w.Requests()[i].Fault; f {
		case faults.Hold:
			if !errors.Is(err, storage.ErrAmbiguous) {
				t.Fatalf("held put %d: err = %v", i, err)
			}
		case faults.Delay:
			if err != nil || took < d {
				t.Fatalf("delayed put %d: err = %v after %v", i, err, took)
			}
		default:
			t.Fatalf("put %d got %v, want hold or delay", i, f)
		}
	}
	if c := w.Count(faults.OpPut); c.Faults[faults.Hold] != len(w.Held()) || c.Faults[faults.Hold] == 0 || c.Faults[faults.Delay] == 0 {
		t.Fatalf("put tally %+v with %d held: want both modes, every hold still held", c, len(w.Held()))
	}
}

func TestWaitHeld_ContextEnds_ReturnsItsError(t *testing.T) {
	w := faults.Wrap(openLocal(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := w.WaitHeld(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
}

// Requests and rule changes from many goroutines are all counted exactly
// (run with -race to check the locking).
func TestStore_ConcurrentUse_CountsEveryRequest(t *testing.T) {
	w := faults.Wrap(openLocal(t))
	const writers, each = 8, 25
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				remove := w.Add(faults.Rule{Op: faults.OpHead, Mode: faults.FailBeforeSend})
				putIfAbsent(w, fmt.Sprintf("g%d/%d", g, i), "x")
				w.Head(context.Background(), fmt.Sprintf("g%d/%d", g, i))
				remove()
			}
		})
	}
	wg.Wait()
	c := w.Counts()
	if c[faults.OpPut].Attempted != writers*each || c[faults.OpPut].Sent != writers*each {
		t.Fatalf("put tally = %+v, want %d attempted and sent", c[faults.OpPut], writers*each)
	}
	if c[faults.OpHead].Attempted != writers*each || c[faults.OpHead].Faults[faults.FailBeforeSend] != writers*each {
		t.Fatalf("head tally = %+v, want %d attempted, all failed before send", c[faults.OpHead], writers*each)
	}
}

func TestRule_Body_SelectsOnlyPutsWhoseBodyMatches(t *testing.T) {
	inner, err := localfs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := faults.Wrap(inner)
	s.Add(faults.Rule{Name: "live-only", Op: faults.OpPut, KeyPrefix: "refs/", Mode: faults.FailBeforeSend,
		Body: func(b []byte) bool { return bytes.Contains(b, []byte(`"live"`)) }})
	ctx := context.Background()
	if _, err := s.Put(ctx, "refs/a", []byte(`{"state":"live"}`), storage.PutOptions{IfNoneMatch: true}); !errors.Is(err, storage.ErrAmbiguous) {
		t.Fatalf("live put: got %v, want injected ambiguous", err)
	}
	if _, err := s.Put(ctx, "refs/a", []byte(`{"state":"fence"}`), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("fence put: got %v, want it to pass the rule", err)
	}
	if got := s.CountMatching(faults.Rule{Op: faults.OpPut, Body: func(b []byte) bool { return bytes.Contains(b, []byte(`"live"`)) }}); got.Attempted != 1 || got.Sent != 0 {
		t.Fatalf("live puts counted %+v, want 1 attempted, 0 sent", got)
	}
}
