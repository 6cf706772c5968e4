package graph

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// A graph owns its whole prefix, and only it (docs/format.md, *Ownership*):
// init refuses a prefix holding anything else, and import refuses keys a graph
// owns or may come to own.

// ErrPrefixTaken reports an init whose prefix holds objects not its own.
var ErrPrefixTaken = errors.New("graph: the graph's prefix holds objects graft did not write for it")

// PrefixTakenError names such an object; it matches ErrPrefixTaken.
type PrefixTakenError struct {
	Graph, Key string
}

func (e *PrefixTakenError) Error() string {
	return fmt.Sprintf("graph %q: its prefix %s already holds %s, which graft did not write for this graph",
		e.Graph, format.GraphPrefix(e.Graph), e.Key)
}

// Is matches ErrPrefixTaken.
func (e *PrefixTakenError) Is(target error) bool { return target == ErrPrefixTaken }

// CheckInitPrefix lists a new graph's prefix and returns a *PrefixTakenError
// for the first key own does not accept (own accepts an interrupted run's
// keys). It reads a page of a few keys unless own accepts them all.
func CheckInitPrefix(ctx context.Context, s storage.Store, graph string, own func(key string) bool) error {
	opts := storage.ListOptions{Prefix: format.GraphPrefix(graph), Limit: 4}
	for {
		page, err := s.List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list prefix %s: %w", opts.Prefix, err)
		}
		for _, o := range page.Objects {
			if !own(o.Key) {
				return &PrefixTakenError{Graph: graph, Key: o.Key}
			}
		}
		if !page.Truncated || len(page.Objects) == 0 {
			return nil
		}
		opts.StartAfter = page.Objects[len(page.Objects)-1].Key
	}
}

// ImportKeyOwned says why key must not be imported into graph, or "".
func ImportKeyOwned(graph, key string) string {
	if strings.HasPrefix(key, format.GraphPrefix(graph)) {
		return "under the graph's own prefix"
	}
	if shape, ok := format.GraftShaped(key); ok {
		return fmt.Sprintf("shaped like a key graft writes for a graph (%s), whether or not a graph exists there now", shape)
	}
	return ""
}

// importHint is what a refused import's message tells the user to do.
const importHint = "import only objects outside every graph's prefix (copy the object there first)"

// CheckImportKeys refuses, as a *ParamError on field(i), the first key a graph
// owns or may own: one ImportKeyOwned names, or one under the prefix of an
// existing graph (whose cleanup could delete it under another graph's entry).
// It HEADs each candidate graph record once, in parallel, and writes nothing.
func CheckImportKeys(ctx context.Context, s storage.Store, graph string, keys []string, field func(i int) string) error {
	var records []string
	for i, k := range keys {
		if why := ImportKeyOwned(graph, k); why != "" {
			return invalidf(field(i), "%s is %s; %s", k, why, importHint)
		}
		for _, p := range format.GraphPrefixesOf(k) {
			records = append(records, p+"graph.json")
		}
	}
	slices.Sort(records)
	records = slices.Compact(records)
	exists := make([]bool, len(records))
	errs := make([]error, len(records))
	bounded.Each(len(records), importConcurrency, func(i int) {
		_, err := s.Head(ctx, records[i])
		switch {
		case err == nil:
			exists[i] = true
		case !errors.Is(err, storage.ErrNotFound):
			errs[i] = fmt.Errorf("read graph record %s: %w", records[i], err)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i, k := range keys {
		for _, p := range format.GraphPrefixesOf(k) {
			if j, ok := slices.BinarySearch(records, p+"graph.json"); ok && exists[j] {
				return invalidf(field(i), "%s is under the prefix %s of a graph (%sgraph.json exists), which owns every key there; %s",
					k, p, p, importHint)
			}
		}
	}
	return nil
}
