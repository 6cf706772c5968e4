package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
)

// controlBody returns the 256-byte body of iteration i: about the size of a
// branch ref or a small commit, and different for every i so each CAS really
// changes the object's ETag.
func controlBody(i int) []byte {
	b := fmt.Appendf(nil, `{"format":1,"bench":%d,"pad":"`, i)
	for len(b) < 256-2 {
		b = append(b, 'x')
	}
	return append(b, '"', '}')
}

// BenchmarkPutIfAbsent measures a put-if-absent that wins: each iteration
// creates a new key with If-None-Match: *.
func BenchmarkPutIfAbsent(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			ctx := context.Background()
			st := be.target(b)
			var lat Latencies
			for i := 0; b.Loop(); i++ {
				key := fmt.Sprintf("bench/put-if-absent/%08d.json", i)
				start := time.Now()
				_, err := st.Put(ctx, key, controlBody(i), storage.PutOptions{IfNoneMatch: true})
				lat.Add(time.Since(start))
				if err != nil {
					b.Fatalf("put-if-absent %s: %v", key, err)
				}
			}
			report(b, st, &lat)
		})
	}
}

// BenchmarkPutIfAbsentTaken measures a put-if-absent that loses: the key
// exists, so every iteration is answered 412 and applies nothing. This is the
// answer a settling re-issue gets when its first put had landed.
func BenchmarkPutIfAbsentTaken(b *testing.B) {
	benchLosingPut(b, "bench/taken.json", 1, func(context.Context, target, storage.PutResult) (storage.PutOptions, error) {
		return storage.PutOptions{IfNoneMatch: true}, nil
	})
}

// BenchmarkCAS measures a compare-and-swap that wins: each iteration puts new
// bytes with If-Match of the ETag the previous put returned, reading nothing.
func BenchmarkCAS(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			ctx := context.Background()
			st := be.target(b)
			const key = "bench/cas.json"
			res, err := st.Put(ctx, key, controlBody(0), storage.PutOptions{IfNoneMatch: true})
			if err != nil {
				b.Fatalf("put %s: %v", key, err)
			}
			etag := res.ETag
			st.reset()
			var lat Latencies
			for i := 1; b.Loop(); i++ {
				start := time.Now()
				res, err := st.Put(ctx, key, controlBody(i), storage.PutOptions{IfMatch: etag})
				lat.Add(time.Since(start))
				if err != nil {
					b.Fatalf("cas %s (iteration %d): %v", key, i, err)
				}
				if res.ETag == etag {
					b.Fatalf("cas %s (iteration %d): ETag unchanged after writing new bytes", key, i)
				}
				etag = res.ETag
			}
			report(b, st, &lat)
		})
	}
}

// BenchmarkCASStale measures a compare-and-swap that loses: every iteration
// sends an If-Match of an ETag the object no longer has, and is answered 412.
func BenchmarkCASStale(b *testing.B) {
	benchLosingPut(b, "bench/cas-stale.json", 2, func(ctx context.Context, st target, old storage.PutResult) (storage.PutOptions, error) {
		_, err := st.Put(ctx, "bench/cas-stale.json", controlBody(1), storage.PutOptions{IfMatch: old.ETag})
		return storage.PutOptions{IfMatch: old.ETag}, err
	})
}

// benchLosingPut creates key on every backend, lets setup prepare it and name
// the put options that lose, then times puts with them from iteration first
// on, each of which must be answered ErrPreconditionFailed.
func benchLosingPut(b *testing.B, key string, first int, setup func(context.Context, target, storage.PutResult) (storage.PutOptions, error)) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			ctx := context.Background()
			st := be.target(b)
			created, err := st.Put(ctx, key, controlBody(0), storage.PutOptions{IfNoneMatch: true})
			if err != nil {
				b.Fatalf("put %s: %v", key, err)
			}
			opts, err := setup(ctx, st, created)
			if err != nil {
				b.Fatalf("prepare %s: %v", key, err)
			}
			st.reset()
			var lat Latencies
			for i := first; b.Loop(); i++ {
				start := time.Now()
				_, err := st.Put(ctx, key, controlBody(i), opts)
				lat.Add(time.Since(start))
				if !errors.Is(err, storage.ErrPreconditionFailed) {
					b.Fatalf("losing put %s: err = %v, want ErrPreconditionFailed", key, err)
				}
			}
			report(b, st, &lat)
		})
	}
}

// TestConditionalWrites_OneRequestEach backs the conditional-write figures:
// on every backend a put-if-absent or a CAS, won or lost, is one put request
// (one HTTP request on S3: writes are never retried).
func TestConditionalWrites_OneRequestEach(t *testing.T) {
	onePut := map[faults.Op]int{faults.OpPut: 1}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			st := be.target(t)
			const key = "bench/one-request.json"
			steps := []struct {
				name    string
				body    []byte
				opts    storage.PutOptions
				wantErr error
			}{
				{"put-if-absent wins", controlBody(0), storage.PutOptions{IfNoneMatch: true}, nil},
				{"put-if-absent loses", controlBody(1), storage.PutOptions{IfNoneMatch: true}, storage.ErrPreconditionFailed},
				{"cas wins", controlBody(2), storage.PutOptions{}, nil}, // IfMatch set below
				{"cas loses", controlBody(3), storage.PutOptions{}, storage.ErrPreconditionFailed},
			}
			var first, current string
			for i, step := range steps {
				switch i {
				case 2:
					step.opts.IfMatch = current
				case 3:
					step.opts.IfMatch = first // stale since "cas wins"
				}
				st.reset()
				res, err := st.Put(ctx, key, step.body, step.opts)
				if !errors.Is(err, step.wantErr) {
					t.Fatalf("%s: err = %v, want %v", step.name, err, step.wantErr)
				}
				if err == nil {
					current = res.ETag
					if first == "" {
						first = res.ETag
					}
				}
				if got := st.sent(); !maps.Equal(got, onePut) {
					t.Errorf("%s: sent %v, want %v", step.name, got, onePut)
				}
				st.requireOneHTTPRequestEach(t)
			}
		})
	}
}
