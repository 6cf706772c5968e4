package storagetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/graftworks/graft/storage"
)

// racingWriters is how many writers the race cases release at once.
const racingWriters = 20

// madeUpETag has the shape of an S3 single-part ETag but names no bytes any
// case writes.
const madeUpETag = `"0123456789abcdef0123456789abcdef"`

var conditionalCases = []conformanceCase{
	{"PutIfNoneMatch_Twice_SecondIsPreconditionFailedFirstBytesKept", func(t *testing.T, s storage.Store) {
		const key = "refs/branches/main.json"
		first := mustPut(t, s, key, []byte("first"), storage.PutOptions{IfNoneMatch: true})
		requireCode(t, errOf(s.Put(t.Context(), key, []byte("second"), storage.PutOptions{IfNoneMatch: true})), storage.CodePreconditionFailed, "second put-if-absent")
		requireObject(t, s, key, "first", first.ETag)
	}},
	{"PutIfNoneMatch_20RacingWriters_ExactlyOneWins", func(t *testing.T, s storage.Store) {
		requireOneWinner(t, s, "refs/branches/raced.json", storage.PutOptions{IfNoneMatch: true})
	}},
	{"PutIfMatch_CurrentETag_SucceedsAndChangesETag", func(t *testing.T, s storage.Store) {
		const key = "graph.json"
		v1 := mustPut(t, s, key, []byte("v1"), storage.PutOptions{IfNoneMatch: true})
		v2 := mustPut(t, s, key, []byte("v2"), storage.PutOptions{IfMatch: v1.ETag})
		if v2.ETag == v1.ETag {
			t.Fatalf("ETag unchanged (%q) after a compare-and-swap to different bytes", v1.ETag)
		}
		head, err := s.Head(t.Context(), key)
		if err != nil {
			t.Fatalf("head: %v", err)
		}
		if head.ETag != v2.ETag {
			t.Fatalf("head ETag = %q, want the swap's %q", head.ETag, v2.ETag)
		}
		requireObject(t, s, key, "v2")
	}},
	{"PutIfMatch_StaleETag_IsPreconditionFailed", func(t *testing.T, s storage.Store) {
		const key = "graph.json"
		v1 := mustPut(t, s, key, []byte("v1"), storage.PutOptions{IfNoneMatch: true})
		v2 := mustPut(t, s, key, []byte("v2"), storage.PutOptions{IfMatch: v1.ETag})
		requireCode(t, errOf(s.Put(t.Context(), key, []byte("v3"), storage.PutOptions{IfMatch: v1.ETag})), storage.CodePreconditionFailed, "put with the ETag from before an update")
		requireObject(t, s, key, "v2", v2.ETag)
	}},
	{"PutIfMatch_MadeUpETag_IsPreconditionFailed", func(t *testing.T, s storage.Store) {
		const key = "graph.json"
		v1 := mustPut(t, s, key, []byte("v1"), storage.PutOptions{IfNoneMatch: true})
		if v1.ETag == madeUpETag {
			t.Fatalf("the made-up ETag %s names real bytes; pick another", madeUpETag)
		}
		requireCode(t, errOf(s.Put(t.Context(), key, []byte("v2"), storage.PutOptions{IfMatch: madeUpETag})), storage.CodePreconditionFailed, "put with a made-up ETag")
		requireObject(t, s, key, "v1")
	}},
	{"PutIfMatch_MissingKey_IsPreconditionFailed", func(t *testing.T, s storage.Store) {
		const key = "graph.json"
		requireCode(t, errOf(s.Put(t.Context(), key, []byte("v1"), storage.PutOptions{IfMatch: madeUpETag})), storage.CodePreconditionFailed, "put-if-match on a missing key")
		requireCode(t, errOf(s.Get(t.Context(), key)), storage.CodeNotFound, "get after a failed put-if-match")
	}},
	{"PutIfMatch_20RacingWriters_ExactlyOneWins", func(t *testing.T, s storage.Store) {
		const key = "trees/main/head.json"
		base := mustPut(t, s, key, []byte("base"), storage.PutOptions{IfNoneMatch: true})
		requireOneWinner(t, s, key, storage.PutOptions{IfMatch: base.ETag})
	}},
	{"Put_IfNoneMatchAndIfMatch_IsInvalidArgument", func(t *testing.T, s storage.Store) {
		const key = "graph.json"
		v1 := mustPut(t, s, key, []byte("v1"), storage.PutOptions{IfNoneMatch: true})
		requireCode(t, errOf(s.Put(t.Context(), key, []byte("v2"), storage.PutOptions{IfNoneMatch: true, IfMatch: v1.ETag})), storage.CodeInvalidArgument, "put with both conditions")
		requireObject(t, s, key, "v1") // the invalid put must change nothing
	}},
}

// raceOutcome is what one racing writer saw.
type raceOutcome struct {
	body []byte
	res  storage.PutResult
	err  error
}

// requireOneWinner releases racingWriters puts of key under opts at once and
// checks that exactly one succeeded, every other got ErrPreconditionFailed,
// and key holds the winner's bytes and ETag.
func requireOneWinner(t *testing.T, s storage.Store, key string, opts storage.PutOptions) {
	t.Helper()
	outcomes := make([]raceOutcome, racingWriters)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range outcomes {
		wg.Go(func() {
			<-start
			body := fmt.Appendf(nil, "writer %02d", i)
			res, err := s.Put(t.Context(), key, body, opts)
			outcomes[i] = raceOutcome{body: body, res: res, err: err}
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, o := range outcomes {
		if o.err == nil {
			if winner >= 0 {
				t.Fatalf("writers %d and %d both succeeded", winner, i)
			}
			winner = i
			continue
		}
		if problem := checkCode(o.err, storage.CodePreconditionFailed); problem != nil {
			t.Errorf("losing writer %d: %v", i, problem)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer of %d succeeded", len(outcomes))
	}
	requireObject(t, s, key, string(outcomes[winner].body), outcomes[winner].res.ETag)
}
