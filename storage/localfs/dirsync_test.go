package localfs

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Puts that commit into one directory at once share directory fsyncs, and each returns
// only after an fsync that began after its call had finished.
func TestDirSyncs_ConcurrentCallers_ShareFsyncsThatBeganAfterThem(t *testing.T) {
	var seq atomic.Int64
	type span struct{ began, ended int64 }
	var mu sync.Mutex
	var fsyncs []span
	defer func(f func(string) error) { fsyncDir = f }(fsyncDir)
	fsyncDir = func(string) error {
		began := seq.Add(1)
		time.Sleep(time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		fsyncs = append(fsyncs, span{began, seq.Add(1)})
		return nil
	}
	var s dirSyncs
	const callers = 64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			called := seq.Add(1)
			if err := s.sync("d"); err != nil {
				t.Error(err)
			}
			returned := seq.Add(1)
			mu.Lock()
			defer mu.Unlock()
			for _, f := range fsyncs {
				if f.began > called && f.ended < returned {
					return
				}
			}
			t.Errorf("a caller (%d..%d) returned without an fsync that began after its call: %v", called, returned, fsyncs)
		})
	}
	wg.Wait()
	if n := len(fsyncs); n == 0 || n >= callers {
		t.Fatalf("%d fsyncs for %d callers at once; want them shared", n, callers)
	}
	if len(s.dirs) != 0 {
		t.Fatalf("%d directories still held after every caller returned", len(s.dirs))
	}
}

// A failed fsync is its waiters' error, and the next caller starts afresh.
func TestDirSyncs_FailedFsync_IsItsWaitersErrorOnly(t *testing.T) {
	boom := errors.New("fsync failed")
	defer func(f func(string) error) { fsyncDir = f }(fsyncDir)
	fsyncDir = func(string) error { return boom }
	var s dirSyncs
	if err := s.sync("d"); !errors.Is(err, boom) {
		t.Fatalf("sync: %v, want the fsync's error", err)
	}
	fsyncDir = func(string) error { return nil }
	if err := s.sync("d"); err != nil {
		t.Fatalf("sync after a failed one: %v", err)
	}
}
