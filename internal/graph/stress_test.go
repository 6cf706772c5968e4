package graph

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/memstore"
)

// Concurrent writers append to one branch under a seeded fault schedule,
// settling every answer: every append reported done is on the branch (by
// first parents from its head), every one reported stale is not, no commit
// key ever holds other bytes than first written, and no ref version repeats.
func TestConcurrentAppendsUnderSeededFaults_KeepTheInvariants(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			ctx := context.Background()
			mem := memstore.New()
			s := faults.Wrap(mem)
			g, _ := mustInitGraph(t, s)
			rule := faults.Seeded(seed, faults.Probabilities{FailBeforeSend: 0.1, ApplyLoseAnswer: 0.1, Refuse: map[int]float64{503: 0.05}})
			rule.KeyPrefix = "sales/"
			s.Add(rule)
			var (
				mu       sync.Mutex
				done     []format.CommitID
				stale    []format.CommitID
				bodies   = map[string][]byte{}
				wg       sync.WaitGroup
				failures []error
			)
			for w := 0; w < 4; w++ {
				wg.Go(func() {
					for i := 0; i < 15; i++ {
						sp := spec("main", w*100+i, map[string]ulid.ULID{fmt.Sprintf("t%d", w): vid(w*100 + i)})
						sp.Op = fmt.Sprintf("op-w%d-%d", w, i)
						for {
							p, err := g.PlanAppend(ctx, sp)
							if err != nil {
								continue // a read failed: plan again
							}
							if err := g.WriteAppend(ctx, p); err != nil {
								continue
							}
							mu.Lock()
							bodies[p.CommitKey] = p.CommitBody
							mu.Unlock()
							_, err = g.Publish(ctx, p.Publish)
							for tries := 0; (errors.Is(err, storage.ErrAmbiguous) || errors.Is(err, storage.ErrUnavailable)) && tries < 50; tries++ {
								_, err = g.SettlePublish(ctx, p.Publish)
							}
							mu.Lock()
							switch {
							case err == nil:
								done = append(done, p.Commit.ID)
							case errors.Is(err, ErrStaleHead):
								stale = append(stale, p.Commit.ID)
							default:
								failures = append(failures, err)
							}
							mu.Unlock()
							if err == nil || !errors.Is(err, ErrStaleHead) {
								break
							}
						}
					}
				})
			}
			wg.Wait()
			for _, err := range failures {
				// A read that failed in the settle's walk is in doubt, not a
				// wrong answer; anything else is a bug.
				t.Logf("failure: %v", err)
				if !errors.Is(err, storage.ErrUnavailable) && !errors.Is(err, storage.ErrAmbiguous) {
					t.Errorf("unexpected failure: %v", err)
				}
			}
			s2, _ := Open(mem, "sales")
			h, err := s2.BranchHead(ctx, "main")
			if err != nil {
				t.Fatal(err)
			}
			chain := map[format.CommitID]bool{}
			for c := h.Commit; ; {
				chain[c.ID] = true
				if c.FirstParent().IsZero() {
					break
				}
				if c, err = s2.Commit(ctx, c.FirstParent()); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range done {
				if !chain[id] {
					t.Errorf("append %s reported done is not on main", id)
				}
			}
			for _, id := range stale {
				if chain[id] {
					t.Errorf("append %s reported stale is on main", id)
				}
			}
			if len(done) != 60 || int64(len(chain)) != h.Commit.ID.Seq+1 {
				t.Errorf("%d appends done of 60, chain of %d at head seq %d", len(done), len(chain), h.Commit.ID.Seq)
			}
			for key, want := range bodies {
				obj, err := mem.Get(ctx, key)
				if err != nil || !bytes.Equal(obj.Body, want) {
					t.Errorf("%s changed: %v", key, err)
				}
			}
			t.Logf("seed %d: %d done, %d stale re-planned, %d requests faulted", seed, len(done), len(stale), faultedCount(s))
		})
	}
}

func faultedCount(s *faults.Store) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Fault != faults.None {
			n++
		}
	}
	return n
}

// Twenty writers swap the same ref from the same ETag on the real server:
// exactly one publishes, the others are told stale.
func TestTwentyRacingPublishes_ExactlyOneWins(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			s := b.open(t)
			g, _ := mustInitGraph(t, s)
			head := headOf(t, g, "main")
			plans := make([]AppendPlan, 20)
			for i := range plans {
				sp := spec("main", i, map[string]ulid.ULID{"t": vid(i)})
				p, err := g.PlanAppendOn(ctx, head, sp)
				if err != nil {
					t.Fatal(err)
				}
				if err := g.WriteAppend(ctx, p); err != nil {
					t.Fatal(err)
				}
				plans[i] = p
			}
			results := make([]error, 20)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range plans {
				wg.Go(func() {
					<-start
					_, results[i] = g.Publish(ctx, plans[i].Publish)
				})
			}
			close(start)
			wg.Wait()
			wins := 0
			for i, err := range results {
				switch {
				case err == nil:
					wins++
					if h := headOf(t, g, "main"); h.Commit.ID != plans[i].Commit.ID {
						t.Fatalf("winner %d is not the head", i)
					}
				case !errors.Is(err, ErrStaleHead):
					t.Fatalf("writer %d: %v", i, err)
				}
			}
			if wins != 1 {
				t.Fatalf("%d writers published", wins)
			}
		})
	}
}
