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
	{"PutIfNoneMatch_Twice_SecondIsPreconditionFailedFirstBytesKept", testPutIfNoneMatchTwice},
	{"PutIfNoneMatch_20RacingWriters_ExactlyOneWins", testPutIfNoneMatchRace},
	{"PutIfMatch_CurrentETag_SucceedsAndChangesETag", testPutIfMatchCurrent},
	{"PutIfMatch_StaleETag_IsPreconditionFailed", testPutIfMatchStale},
	{"PutIfMatch_MadeUpETag_IsPreconditionFailed", testPutIfMatchMadeUp},
	{"PutIfMatch_MissingKey_IsPreconditionFailed", testPutIfMatchMissingKey},
	{"PutIfMatch_20RacingWriters_ExactlyOneWins", testPutIfMatchRace},
	{"Put_IfNoneMatchAndIfMatch_IsInvalidArgument", testPutBothConditions},
}

func testPutIfNoneMatchTwice(t *testing.T, s storage.Store) {
	const key = "refs/branches/main.json"
	first := mustPut(t, s, key, []byte("first"), storage.PutOptions{IfNoneMatch: true})
	_, err := s.Put(t.Context(), key, []byte("second"), storage.PutOptions{IfNoneMatch: true})
	requireCode(t, err, storage.CodePreconditionFailed, "second put-if-absent")
	obj := mustGet(t, s, key)
	if string(obj.Body) != "first" || obj.ETag != first.ETag {
		t.Fatalf("get = {Body:%q ETag:%q}, want the first put's {Body:%q ETag:%q}", obj.Body, obj.ETag, "first", first.ETag)
	}
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
	obj := mustGet(t, s, key)
	if string(obj.Body) != string(outcomes[winner].body) || obj.ETag != outcomes[winner].res.ETag {
		t.Fatalf("get = {Body:%q ETag:%q}, want winner %d's {Body:%q ETag:%q}",
			obj.Body, obj.ETag, winner, outcomes[winner].body, outcomes[winner].res.ETag)
	}
}

func testPutIfNoneMatchRace(t *testing.T, s storage.Store) {
	requireOneWinner(t, s, "refs/branches/raced.json", storage.PutOptions{IfNoneMatch: true})
}

func testPutIfMatchCurrent(t *testing.T, s storage.Store) {
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
	if obj := mustGet(t, s, key); string(obj.Body) != "v2" {
		t.Fatalf("get body = %q, want %q", obj.Body, "v2")
	}
}

func testPutIfMatchStale(t *testing.T, s storage.Store) {
	const key = "graph.json"
	v1 := mustPut(t, s, key, []byte("v1"), storage.PutOptions{IfNoneMatch: true})
	v2 := mustPut(t, s, key, []byte("v2"), storage.PutOptions{IfMatch: v1.ETag})
	_, err := s.Put(t.Context(), key, []byte("v3"), storage.PutOptions{IfMatch: v1.ETag})
	requireCode(t, err, storage.CodePreconditionFailed, "put with the ETag from before an update")
	if obj := mustGet(t, s, key); string(obj.Body) != "v2" || obj.ETag != v2.ETag {
		t.Fatalf("get = {Body:%q ETag:%q}, want {Body:%q ETag:%q}", obj.Body, obj.ETag, "v2", v2.ETag)
	}
}

func testPutIfMatchMadeUp(t *testing.T, s storage.Store) {
	const key = "graph.json"
	v1 := mustPut(t, s, key, []byte("v1"), storage.PutOptions{IfNoneMatch: true})
	if v1.ETag == madeUpETag {
		t.Fatalf("the made-up ETag %s names real bytes; pick another", madeUpETag)
	}
	_, err := s.Put(t.Context(), key, []byte("v2"), storage.PutOptions{IfMatch: madeUpETag})
	requireCode(t, err, storage.CodePreconditionFailed, "put with a made-up ETag")
	if obj := mustGet(t, s, key); string(obj.Body) != "v1" {
		t.Fatalf("get body = %q, want %q", obj.Body, "v1")
	}
}

func testPutIfMatchMissingKey(t *testing.T, s storage.Store) {
	const key = "graph.json"
	_, err := s.Put(t.Context(), key, []byte("v1"), storage.PutOptions{IfMatch: madeUpETag})
	requireCode(t, err, storage.CodePreconditionFailed, "put-if-match on a missing key")
	_, err = s.Get(t.Context(), key)
	requireCode(t, err, storage.CodeNotFound, "get after a failed put-if-match")
}

func testPutIfMatchRace(t *testing.T, s storage.Store) {
	const key = "trees/main/head.json"
	base := mustPut(t, s, key, []byte("base"), storage.PutOptions{IfNoneMatch: true})
	requireOneWinner(t, s, key, storage.PutOptions{IfMatch: base.ETag})
}

func testPutBothConditions(t *testing.T, s storage.Store) {
	const key = "graph.json"
	v1 := mustPut(t, s, key, []byte("v1"), storage.PutOptions{IfNoneMatch: true})
	_, err := s.Put(t.Context(), key, []byte("v2"), storage.PutOptions{IfNoneMatch: true, IfMatch: v1.ETag})
	requireCode(t, err, storage.CodeInvalidArgument, "put with both conditions")
	if obj := mustGet(t, s, key); string(obj.Body) != "v1" {
		t.Fatalf("get body = %q, want %q (the invalid put must change nothing)", obj.Body, "v1")
	}
}
