package localfs

import "sync"

// dirSyncs coalesces the directory fsyncs of puts that commit into one directory at
// once: a put waits for an fsync of its directory that began after its rename, and
// one fsync serves every put waiting when it begins. A put is as durable as with an
// fsync of its own; a table's chunks, put eight at a time, cost about one directory
// fsync per batch instead of one each.
type dirSyncs struct {
	mu   sync.Mutex
	dirs map[string]*dirSync
}

// dirSync is one directory's fsyncs: generations, one running at a time.
type dirSync struct {
	done    *sync.Cond
	running bool
	started uint64 // generations begun
	ended   uint64 // generations finished
	users   int    // callers that hold this entry
	// errs holds the error of a failed generation until its last waiter took it.
	errs    map[uint64]error
	waiters map[uint64]int
}

// fsyncDir is syncDir; tests count the fsyncs.
var fsyncDir = syncDir

// sync returns once an fsync of dir that began after the call has finished, with its error.
func (s *dirSyncs) sync(dir string) error {
	s.mu.Lock()
	if s.dirs == nil {
		s.dirs = map[string]*dirSync{}
	}
	d := s.dirs[dir]
	if d == nil {
		d = &dirSync{done: sync.NewCond(&s.mu), errs: map[uint64]error{}, waiters: map[uint64]int{}}
		s.dirs[dir] = d
	}
	d.users++
	gen := d.started + 1 // the next generation to begin: it begins after this call
	d.waiters[gen]++
	for d.ended < gen {
		if d.running {
			d.done.Wait()
			continue
		}
		d.running = true
		d.started++
		g := d.started
		s.mu.Unlock()
		err := fsyncDir(dir)
		s.mu.Lock()
		d.running, d.ended = false, g
		if err != nil {
			d.errs[g] = err
		}
		d.done.Broadcast()
	}
	err := d.errs[gen]
	if d.waiters[gen]--; d.waiters[gen] == 0 {
		delete(d.waiters, gen)
		delete(d.errs, gen)
	}
	if d.users--; d.users == 0 {
		delete(s.dirs, dir)
	}
	s.mu.Unlock()
	return err
}
