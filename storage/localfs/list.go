package localfs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/graftworks/graft/storage"
)

// readDir is os.ReadDir; tests replace it to see which directories a listing visits.
var readDir = os.ReadDir

// errPageFull stops a walk once it has found enough keys.
var errPageFull = errors.New("page full")

// List returns one page of the keys under opts.Prefix; see storage.Store.
func (s *Store) List(ctx context.Context, opts storage.ListOptions) (storage.ListPage, error) {
	const op = "list"
	limit, err := storage.CheckList(ctx, op, opts.Prefix, opts.Limit)
	if err != nil {
		return storage.ListPage{}, err
	}
	startDir, ok := prefixDir(opts.Prefix)
	if !ok {
		return storage.ListPage{}, nil // no valid key can have this prefix
	}
	w := walker{ctx: ctx, store: s, prefix: opts.Prefix, startAfter: opts.StartAfter, want: limit + 1}
	if err := w.walk(startDir); err != nil && !errors.Is(err, errPageFull) {
		return storage.ListPage{}, newError(op, opts.Prefix, storage.CodeUnavailable, cmp.Or(ctx.Err(), err))
	}
	page := storage.ListPage{Objects: w.found}
	if len(page.Objects) > limit {
		page.Objects, page.Truncated = page.Objects[:limit], true
	}
	return page, nil
}

// prefixDir returns the directory (as a key prefix: "" or ending in '/')
// holding every key starting with prefix; false when no valid key can.
func prefixDir(prefix string) (string, bool) {
	last := strings.LastIndexByte(prefix, '/')
	if last < 0 {
		return "", true
	}
	dir := prefix[:last+1]
	for seg := range strings.SplitSeq(dir[:last], "/") {
		if seg == "" || seg == "." || seg == ".." || strings.HasPrefix(seg, reservedPrefix) {
			return "", false
		}
	}
	return dir, true
}

// walker collects keys in byte order, visiting directories depth-first.
type walker struct {
	ctx        context.Context
	store      *Store
	prefix     string
	startAfter string
	want       int
	found      []storage.ObjectInfo
}

// entry is a directory entry as a key: for a directory, ending in '/'.
type entry struct {
	key string
	dir bool
}

// walk visits the directory of key prefix dir ("" or ending in '/').
func (w *walker) walk(dir string) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	entries, err := readDir(w.store.path(dir))
	if isNotFound(err) {
		return nil // removed while we walked, or never there
	}
	if err != nil {
		return fmt.Errorf("read directory: %w", err)
	}
	var candidates []entry
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, reservedPrefix) {
			continue // locks and temp files
		}
		switch t := e.Type(); {
		case t.IsDir():
			if p := dir + name + "/"; w.mayHold(p) {
				candidates = append(candidates, entry{key: p, dir: true})
			}
		case t.IsRegular():
			if k := dir + name; strings.HasPrefix(k, w.prefix) && k > w.startAfter {
				candidates = append(candidates, entry{key: k})
			}
		}
	}
	// Sorting a directory as its name plus '/' yields S3 order: "a-b" <
	// "a.b" < "a/…" < "a0", whereas by bare name "a" would sort first.
	slices.SortFunc(candidates, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	for _, c := range candidates {
		if c.dir {
			if err := w.walk(c.key); err != nil {
				return err
			}
			continue
		}
		if storage.ValidateKey(c.key) != nil {
			continue // a file an operator placed whose name is no key
		}
		info, err := statObject(w.store.path(c.key), c.key, true)
		if isNotFound(err) {
			continue // deleted or replaced by a directory since we read the directory
		}
		if err != nil {
			return err
		}
		w.found = append(w.found, info)
		if len(w.found) >= w.want {
			return errPageFull
		}
	}
	return nil
}

// mayHold reports whether the directory of key prefix p can hold a key of the
// listing: when p sorts before startAfter and is not its prefix, so do its keys.
func (w *walker) mayHold(p string) bool {
	return (strings.HasPrefix(p, w.prefix) || strings.HasPrefix(w.prefix, p)) &&
		(p >= w.startAfter || strings.HasPrefix(w.startAfter, p))
}
