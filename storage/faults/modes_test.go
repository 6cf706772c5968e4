package faults_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
)

// TestFaultModes runs every fault mode against every backend: the wrapper
// must behave the same whatever store it wraps.
func TestFaultModes(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, open func(*testing.T) storage.Store)
	}{
		{"fail_before_send", testFailBeforeSend},
		{"apply_lose_answer", testApplyLoseAnswer},
		{"hold_lands_on_release", testHoldLandsOnRelease},
		{"hold_put_if_absent_fenced_fails_on_release", testHoldFencedFailsOnRelease},
		{"hold_stale_cas_fails_on_release", testHoldStaleCASFailsOnRelease},
		{"hold_dropped_never_lands", testHoldDroppedNeverLands},
		{"refuse_412", refuseCase(412, storage.CodePreconditionFailed)},
		{"refuse_403", refuseCase(403, storage.CodeRefused)},
		{"refuse_503", refuseCase(503, storage.CodeAmbiguous)},
		{"delay", testDelay},
		{"delay_cancelled", testDelayCancelled},
		{"seeded_deterministic", testSeededDeterministic},
		{"counts_exact", testCountsExact},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, b.open) })
			}
		})
	}
}

// Fail before send: nothing reaches the store, yet the writer cannot know
// that, so a write is ambiguous; a read is unavailable.
func testFailBeforeSend(t *testing.T, open func(*testing.T) storage.Store) {
	inner := open(t)
	w := faults.Wrap(inner)
	ctx := context.Background()
	w.Add(faults.Rule{Name: "drop-ref", Op: faults.OpPut, KeyPrefix: "g/refs/", Mode: faults.FailBeforeSend, Times: 1})

	_, err := putIfAbsent(w, "g/refs/main.json", "ref")
	requireInjected(t, err, faults.OpPut, "g/refs/main.json", storage.CodeAmbiguous, 0, "drop-ref")
	requireAbsent(t, inner, "g/refs/main.json")

	// Times: 1 — the re-issue goes through.
	if _, err := putIfAbsent(w, "g/refs/main.json", "ref"); err != nil {
		t.Fatalf("re-issued put: %v", err)
	}
	requireBody(t, inner, "g/refs/main.json", "ref")

	w.Add(faults.Rule{Name: "drop-read", Op: faults.OpGet, Mode: faults.FailBeforeSend})
	_, err = w.Get(ctx, "g/refs/main.json")
	requireInjected(t, err, faults.OpGet, "g/refs/main.json", storage.CodeUnavailable, 0, "drop-read")

	if got, want := w.Count(faults.OpPut), (faults.Tally{Attempted: 2, Sent: 1,
		Faults: map[faults.Mode]int{faults.None: 1, faults.FailBeforeSend: 1}}); !reflect.DeepEqual(got, want) {
		t.Fatalf("put tally = %+v, want %+v", got, want)
	}
}

// Apply then lose the answer: the write lands, the caller hears ambiguous.
func testApplyLoseAnswer(t *testing.T, open func(*testing.T) storage.Store) {
	inner := open(t)
	w := faults.Wrap(inner)
	ctx := context.Background()
	remove := w.Add(faults.Rule{Name: "lose", Op: faults.OpPut, Mode: faults.ApplyLoseAnswer})

	_, err := putIfAbsent(w, "g/refs/main.json", "ref")
	requireInjected(t, err, faults.OpPut, "g/refs/main.json", storage.CodeAmbiguous, 0, "lose")
	if !errors.Is(err, storage.ErrAmbiguous) {
		t.Fatalf("err = %v, want ErrAmbiguous", err)
	}
	requireBody(t, inner, "g/refs/main.json", "ref")

	// The re-issue is refused by the store (the first one landed), and that
	// answer is lost too: still ambiguous, never a precondition failure.
	_, err = putIfAbsent(w, "g/refs/main.json", "ref")
	requireInjected(t, err, faults.OpPut, "g/refs/main.json", storage.CodeAmbiguous, 0, "lose")
	remove()

	w.Add(faults.Rule{Name: "lose-delete", Op: faults.OpDelete, Mode: faults.ApplyLoseAnswer})
	err = w.Delete(ctx, "g/refs/main.json")
	requireInjected(t, err, faults.OpDelete, "g/refs/main.json", storage.CodeAmbiguous, 0, "lose-delete")
	requireAbsent(t, inner, "g/refs/main.json")

	w.Add(faults.Rule{Name: "lose-list", Op: faults.OpList, Mode: faults.ApplyLoseAnswer})
	_, err = w.List(ctx, storage.ListOptions{Prefix: "g/"})
	requireInjected(t, err, faults.OpList, "g/", storage.CodeUnavailable, 0, "lose-list")
}

// A held put lands only on release, with its original conditions.
func testHoldLandsOnRelease(t *testing.T, open func(*testing.T) storage.Store) {
	inner := open(t)
	w := faults.Wrap(inner)
	ctx := context.Background()
	w.Add(faults.Rule{Name: "hold-ref", KeyGlob: "g/refs/*.json", Mode: faults.Hold})

	_, err := putIfAbsent(w, "g/refs/main.json", "ref")
	requireInjected(t, err, faults.OpPut, "g/refs/main.json", storage.CodeAmbiguous, 0, "hold-ref")
	requireAbsent(t, inner, "g/refs/main.json")

	held := w.Held()
	if len(held) != 1 {
		t.Fatalf("held %d puts, want 1", len(held))
	}
	h := held[0]
	if h.Key() != "g/refs/main.json" || string(h.Body()) != "ref" ||
		h.Options() != (storage.PutOptions{IfNoneMatch: true}) || h.Rule() != "hold-ref" {
		t.Fatalf("held put = {%q %q %+v %q}", h.Key(), h.Body(), h.Options(), h.Rule())
	}

	res, err := h.Release(ctx)
	if err != nil {
		t.Fatalf("release: %v", err)
	}
	obj := requireBody(t, inner, "g/refs/main.json", "ref")
	if obj.ETag != res.ETag {
		t.Fatalf("released put's ETag %q, stored ETag %q", res.ETag, obj.ETag)
	}
	if n := len(w.Held()); n != 0 {
		t.Fatalf("held %d puts after release, want 0", n)
	}
	if _, err := h.Release(ctx); !errors.Is(err, faults.ErrNotHeld) {
		t.Fatalf("second release: err = %v, want ErrNotHeld", err)
	}
}

// A held put-if-absent whose key a fence took meanwhile fails on release,
// and the fence stays.
func testHoldFencedFailsOnRelease(t *testing.T, open func(*testing.T) storage.Store) {
	inner := open(t)
	w := faults.Wrap(inner)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w.Add(faults.Rule{Name: "late-ref", Op: faults.OpPut, KeyPrefix: "g/refs/", Mode: faults.Hold, Times: 1})

	// The publishing put runs elsewhere, as it would in a workflow.
	published := make(chan error, 1)
	go func() {
		_, err := putIfAbsent(w, "g/refs/x.json", "live ref")
		published <- err
	}()
	if err := w.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	requireInjected(t, <-published, faults.OpPut, "g/refs/x.json", storage.CodeAmbiguous, 0, "late-ref")

	if _, err := putIfAbsent(w, "g/refs/x.json", "fence"); err != nil {
		t.Fatalf("fence put: %v", err)
	}
	_, err := w.Held()[0].Release(ctx)
	if !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("release of the late put: err = %v, want ErrPreconditionFailed", err)
	}
	requireBody(t, inner, "g/refs/x.json", "fence")
}

// A held compare-and-swap keeps its If-Match: if the object changed while
// it was held, it fails on release.
func testHoldStaleCASFailsOnRelease(t *testing.T, open func(*testing.T) storage.Store) {
	inner := open(t)
	w := faults.Wrap(inner)
	ctx := context.Background()
	first, err := putIfAbsent(w, "g/refs/x.json", "v1")
	if err != nil {
		t.Fatalf("put v1: %v", err)
	}
	w.Add(faults.Rule{Name: "hold-cas", Op: faults.OpPut, Mode: faults.Hold, Times: 1})

	_, err = w.Put(ctx, "g/refs/x.json", []byte("v2"), storage.PutOptions{IfMatch: first.ETag})
	requireInjected(t, err, faults.OpPut, "g/refs/x.json", storage.CodeAmbiguous, 0, "hold-cas")
	if _, err := w.Put(ctx, "g/refs/x.json", []byte("v3"), storage.PutOptions{IfMatch: first.ETag}); err != nil {
		t.Fatalf("racing CAS: %v", err)
	}
	if _, err := w.Held()[0].Release(ctx); !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("release of the stale CAS: err = %v, want ErrPreconditionFailed", err)
	}
	requireBody(t, inner, "g/refs/x.json", "v3")
}

// A dropped held put is never applied.
func testHoldDroppedNeverLands(t *testing.T, open func(*testing.T) storage.Store) {
	inner := open(t)
	w := faults.Wrap(inner)
	ctx := context.Background()
	w.Add(faults.Rule{Name: "lost-in-network", Mode: faults.Hold})

	_, err := putIfAbsent(w, "g/refs/x.json", "ref")
	requireInjected(t, err, faults.OpPut, "g/refs/x.json", storage.CodeAmbiguous, 0, "lost-in-network")
	h := w.Held()[0]
	h.Drop()
	h.Drop() // dropping twice does nothing
	if n := len(w.Held()); n != 0 {
		t.Fatalf("held %d puts after drop, want 0", n)
	}
	if _, err := h.Release(ctx); !errors.Is(err, faults.ErrNotHeld) {
		t.Fatalf("release after drop: err = %v, want ErrNotHeld", err)
	}
	requireAbsent(t, inner, "g/refs/x.json")
}

// refuseCase proves a refusal with status applies nothing and classifies
// as the S3 backend would: writeCode for a write, unavailable for a read.
func refuseCase(status int, writeCode storage.Code) func(*testing.T, func(*testing.T) storage.Store) {
	return func(t *testing.T, open func(*testing.T) storage.Store) {
		inner := open(t)
		w := faults.Wrap(inner)
		ctx := context.Background()
		if _, err := putIfAbsent(inner, "g/refs/old.json", "old"); err != nil {
			t.Fatalf("seed object: %v", err)
		}
		name := fmt.Sprintf("refuse-%d", status)
		w.Add(faults.Rule{Name: name, Mode: faults.Refuse, Status: status})

		_, err := putIfAbsent(w, "g/refs/new.json", "new")
		requireInjected(t, err, faults.OpPut, "g/refs/new.json", writeCode, status, name)
		requireAbsent(t, inner, "g/refs/new.json")

		_, err = w.Put(ctx, "g/refs/old.json", []byte("changed"), storage.PutOptions{IfMatch: "\"any\""})
		requireInjected(t, err, faults.OpPut, "g/refs/old.json", writeCode, status, name)
		err = w.Delete(ctx, "g/refs/old.json")
		requireInjected(t, err, faults.OpDelete, "g/refs/old.json", writeCode, status, name)
		err = w.DeleteBatch(ctx, []string{"g/refs/old.json"})
		requireInjected(t, err, faults.OpDeleteBatch, "", writeCode, status, name)
		requireBody(t, inner, "g/refs/old.json", "old")

		_, err = w.Get(ctx, "g/refs/old.json")
		requireInjected(t, err, faults.OpGet, "g/refs/old.json", storage.CodeUnavailable, status, name)
		_, err = w.Head(ctx, "g/refs/old.json")
		requireInjected(t, err, faults.OpHead, "g/refs/old.json", storage.CodeUnavailable, status, name)

		// A refused request was sent and answered.
		if got := w.Count(faults.OpPut); got.Sent != 2 || got.Faults[faults.Refuse] != 2 {
			t.Fatalf("put tally = %+v, want 2 sent, 2 refused", got)
		}
	}
}

// A delay holds the request back, then lets it through.
func testDelay(t *testing.T, open func(*testing.T) storage.Store) {
	inner := open(t)
	w := faults.Wrap(inner)
	const d = 200 * time.Millisecond
	w.Add(faults.Rule{Name: "slow", Op: faults.OpPut, Mode: faults.Delay, Delay: d})

	start := time.Now()
	if _, err := putIfAbsent(w, "g/refs/x.json", "ref"); err != nil {
		t.Fatalf("delayed put: %v", err)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("delayed put took %v, want at least %v", took, d)
	}
	requireBody(t, inner, "g/refs/x.json", "ref")
}

// A delay cut short by the context sends nothing; the caller gets the
// context's error, ambiguous for a write and unavailable for a read.
func testDelayCancelled(t *testing.T, open func(*testing.T) storage.Store) {
	inner := open(t)
	w := faults.Wrap(inner)
	const d = 5 * time.Second
	w.Add(faults.Rule{Name: "stuck", Mode: faults.Delay, Delay: d})

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := w.Put(ctx, "g/refs/x.json", []byte("ref"), storage.PutOptions{IfNoneMatch: true})
	if took := time.Since(start); took >= d {
		t.Fatalf("cancelled put took %v, the whole delay", took)
	}
	requireInjected(t, err, faults.OpPut, "g/refs/x.json", storage.CodeAmbiguous, 0, "stuck")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded in its chain", err)
	}
	_, err = w.Get(ctx, "g/refs/x.json")
	requireInjected(t, err, faults.OpGet, "g/refs/x.json", storage.CodeUnavailable, 0, "stuck")

	requireAbsent(t, inner, "g/refs/x.json")
	if got := w.Count(faults.OpPut); got.Attempted != 1 || got.Sent != 0 {
		t.Fatalf("put tally = %+v, want 1 attempted, 0 sent", got)
	}
}

// seededTrace is what a caller and an observer see of one seeded run.
type seededTrace struct {
	Faults []faults.Mode
	Codes  []storage.Code // the caller's error code per request, CodeUnknown for success
	Keys   []string       // keys present afterwards
}

func runSeeded(t *testing.T, inner storage.Store, seed int64) seededTrace {
	t.Helper()
	w := faults.Wrap(inner)
	ctx := context.Background()
	w.Add(faults.Seeded(seed, faults.Probabilities{
		FailBeforeSend:  0.2,
		ApplyLoseAnswer: 0.2,
		Refuse:          map[int]float64{503: 0.1, 412: 0.05},
	}))
	var tr seededTrace
	code := func(err error) storage.Code {
		if err == nil {
			return storage.CodeUnknown
		}
		return storage.CodeOf(err)
	}
	for i := range 24 {
		key := fmt.Sprintf("g/objects/%02d", i%8)
		_, err := putIfAbsent(w, key, "body")
		tr.Codes = append(tr.Codes, code(err))
		_, err = w.Head(ctx, key)
		tr.Codes = append(tr.Codes, code(err))
	}
	for _, r := range w.Requests() {
		tr.Faults = append(tr.Faults, r.Fault)
	}
	if err := storage.ListAll(ctx, inner, "g/", func(o storage.ObjectInfo) error {
		tr.Keys = append(tr.Keys, o.Key)
		return nil
	}); err != nil {
		t.Fatalf("list: %v", err)
	}
	return tr
}

// The same seed gives the same faults, the same answers and the same final
// state; another seed gives other faults.
func testSeededDeterministic(t *testing.T, open func(*testing.T) storage.Store) {
	a := runSeeded(t, open(t), 7)
	b := runSeeded(t, open(t), 7)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 7 twice:\n%+v\n%+v", a, b)
	}
	seen := map[faults.Mode]int{}
	for _, m := range a.Faults {
		seen[m]++
	}
	for _, m := range []faults.Mode{faults.None, faults.FailBeforeSend, faults.ApplyLoseAnswer, faults.Refuse} {
		if seen[m] == 0 {
			t.Fatalf("seed 7 never chose %v in %d requests: %v", m, len(a.Faults), a.Faults)
		}
	}
	c := runSeeded(t, open(t), 8)
	if reflect.DeepEqual(a.Faults, c.Faults) {
		t.Fatalf("seeds 7 and 8 chose the same faults: %v", a.Faults)
	}
}

// Counts are exact per operation, per fault, and per key pattern.
func testCountsExact(t *testing.T, open func(*testing.T) storage.Store) {
	w := faults.Wrap(open(t))
	ctx := context.Background()
	w.Add(faults.Rule{Name: "first-ref", Op: faults.OpPut, KeyPrefix: "g/refs/", Mode: faults.FailBeforeSend, Times: 1})

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := putIfAbsent(w, "g/refs/a.json", "a")
	if !errors.Is(err, storage.ErrAmbiguous) {
		t.Fatalf("first ref put: err = %v, want ErrAmbiguous", err)
	}
	_, err = putIfAbsent(w, "g/refs/a.json", "a")
	must(err)
	_, err = putIfAbsent(w, "g/refs/b.json", "b")
	must(err)
	_, err = putIfAbsent(w, "g/data/x", "x")
	must(err)
	_, err = w.Get(ctx, "g/refs/a.json")
	must(err)
	_, err = w.Head(ctx, "g/data/x")
	must(err)
	_, err = w.List(ctx, storage.ListOptions{Prefix: "g/refs/"})
	must(err)
	must(w.Delete(ctx, "g/data/x"))
	must(w.DeleteBatch(ctx, []string{"g/refs/a.json", "g/refs/b.json"}))
	// Invalid requests never reach the wire and are not counted.
	if _, err := putIfAbsent(w, "g//bad", "x"); !errors.Is(err, storage.ErrInvalidKey) {
		t.Fatalf("put of an invalid key: err = %v, want ErrInvalidKey", err)
	}

	passed := func(n int) map[faults.Mode]int { return map[faults.Mode]int{faults.None: n} }
	want := faults.Counts{
		faults.OpPut:         {Attempted: 4, Sent: 3, Faults: map[faults.Mode]int{faults.None: 3, faults.FailBeforeSend: 1}},
		faults.OpGet:         {Attempted: 1, Sent: 1, Faults: passed(1)},
		faults.OpHead:        {Attempted: 1, Sent: 1, Faults: passed(1)},
		faults.OpList:        {Attempted: 1, Sent: 1, Faults: passed(1)},
		faults.OpDelete:      {Attempted: 1, Sent: 1, Faults: passed(1)},
		faults.OpDeleteBatch: {Attempted: 1, Sent: 1, Faults: passed(1)},
	}
	if got := w.Counts(); !reflect.DeepEqual(got, want) {
		t.Fatalf("counts = %+v, want %+v", got, want)
	}

	refPuts := w.CountMatching(faults.Rule{Op: faults.OpPut, KeyPrefix: "g/refs/"})
	if refPuts.Attempted != 3 || refPuts.Sent != 2 {
		t.Fatalf("ref puts = %+v, want 3 attempted, 2 sent", refPuts)
	}
	// Any operation on a ref key: 3 puts, the get, the list of "g/refs/"
	// (its prefix matches the glob) and the batch delete.
	if got := w.CountMatching(faults.Rule{KeyGlob: "g/refs/*"}).Attempted; got != 6 {
		t.Fatalf("requests on ref keys = %d, want 6", got)
	}

	w.ResetCounts()
	if got := w.Counts(); len(got) != 0 {
		t.Fatalf("counts after reset = %+v, want none", got)
	}
	if got := w.Count(faults.OpPut); got.Attempted != 0 {
		t.Fatalf("put tally after reset = %+v", got)
	}
}
