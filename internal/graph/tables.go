package graph

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// Version is a table version.
type Version = format.TableVersion

// manifests returns the chunk reader of table's manifests, shared by calls.
func (g *Graph) manifests(table string) *mapReader[format.ManifestEntry] {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tables == nil {
		g.tables = map[string]*mapReader[format.ManifestEntry]{}
	}
	r, ok := g.tables[table]
	if !ok {
		r = newMapReader(g.S, format.ManifestMap, g.Name, table)
		g.tables[table] = r
	}
	return r
}

func (g *Graph) manifestOf(v Version) mapTree[format.ManifestEntry] {
	return mapTree[format.ManifestEntry]{r: g.manifests(v.Table), ref: v.Entries}
}

// Version reads a table version: one GET.
func (g *Graph) Version(ctx context.Context, table string, id ulid.ULID) (Version, error) {
	if err := checkParams(param{"Table", format.ValidateTableName(table)}, param{"Version", nonZero(id)}); err != nil {
		return Version{}, err
	}
	what := fmt.Sprintf("read table %s version %s", table, id)
	return getDecoded(ctx, g.S, format.TableVersionKey(g.Name, table, id), what, ErrVersionNotFound,
		format.DecodeTableVersion, func(v Version) error {
			return misnamed(v.Table != table || v.ID != id, format.KindTableVersion, "",
				"is version "+v.ID.String()+" of table "+v.Table+", not the one its key names")
		})
}

// versionOrEmpty reads version id of table; the zero id is the empty table.
func (g *Graph) versionOrEmpty(ctx context.Context, table string, id ulid.ULID) (Version, error) {
	if id.IsZero() {
		return Version{Table: table}, nil
	}
	return g.Version(ctx, table, id)
}

// TableAt reads the version of table that c pins; unpinned: ErrTableNotPinned.
func (g *Graph) TableAt(ctx context.Context, c Commit, table string) (Version, error) {
	id, ok, err := g.Pin(ctx, c, table)
	if err != nil {
		return Version{}, fmt.Errorf("table %s at %s: %w", table, c.ID, err)
	}
	if !ok {
		return Version{}, fmt.Errorf("table %s at %s: %w", table, c.ID, ErrTableNotPinned)
	}
	return g.Version(ctx, table, id)
}

// EachEntry calls fn for every entry of v in name order, a chunk at a time.
func (g *Graph) EachEntry(ctx context.Context, v Version, fn func(format.ManifestEntry) error) error {
	return g.manifestOf(v).each(ctx, fn)
}

// Entry returns v's entry of name, O(height) chunk reads.
func (g *Graph) Entry(ctx context.Context, v Version, name string) (format.ManifestEntry, bool, error) {
	return g.manifestOf(v).get(ctx, name)
}

// ObjectKeyOf returns where an entry's bytes are: its object key or external key.
func ObjectKeyOf(graph, table string, e format.ManifestEntry) string {
	if e.IsExternal() {
		return e.External
	}
	return format.ObjectKey(graph, table, e.Object)
}

// VersionSpec describes a new table version as edits to a base version.
type VersionSpec struct {
	Table     string
	VersionID ulid.ULID
	Base      ulid.ULID              // the version the new one edits; zero for an empty start
	Put       []format.ManifestEntry // adds or replaces entries by name
	Delete    []string               // removes names the base has
	Time      time.Time
	Op        string
}

// VersionPlan is a table version decided before anything is written.
type VersionPlan struct {
	Version                  format.TableVersion
	Key                      string
	Body                     []byte
	Chunks                   []Chunk // the manifest chunks the version names that its base did not
	Added, Replaced, Removed int64   // the entries changed from the base
}

// Keys returns the keys the version writes: its chunks, then itself.
func (p VersionPlan) Keys() []string { return chunkKeys(p.Chunks, p.Key) }

// PlanVersion computes the new version from the base and the manifest chunks on
// the edited paths, writing nothing: k edits make O(k) new chunks at most, O(1)
// when the new names sort last (ULIDs do).
func (g *Graph) PlanVersion(ctx context.Context, spec VersionSpec) (VersionPlan, error) {
	fail := func(err error) (VersionPlan, error) {
		return VersionPlan{}, fmt.Errorf("plan version of table %s: %w", spec.Table, err)
	}
	if err := format.ValidateTableName(spec.Table); err != nil {
		return fail(invalid("Table", err))
	}
	if spec.VersionID.IsZero() || spec.VersionID == spec.Base {
		return fail(invalidf("VersionID", "zero, or the base's"))
	}
	if err := checkParams(param{"Op", format.ValidateOp(spec.Op)}, param{"Time", format.ValidateTime(spec.Time)}); err != nil {
		return fail(err)
	}
	edits := make([]mapEdit[format.ManifestEntry], 0, len(spec.Put)+len(spec.Delete)) // edit i is Put[i], or Delete[i-len(Put)]
	for i := range spec.Put {
		e := &spec.Put[i]
		if err := format.ManifestMap.ValidateEntry(*e); err != nil {
			return fail(invalid(fmt.Sprintf("Put[%d]", i), err))
		}
		if e.IsExternal() && strings.HasPrefix(e.External, format.GraphPrefix(g.Name)) {
			return fail(invalidf(fmt.Sprintf("Put[%d]", i), "external key %s is under the graph's own prefix", e.External))
		}
		edits = append(edits, mapEdit[format.ManifestEntry]{Key: e.Name, Entry: e})
	}
	for i, name := range spec.Delete {
		if err := format.ValidateEntryName(name); err != nil {
			return fail(invalid(fmt.Sprintf("Delete[%d]", i), err))
		}
		edits = append(edits, mapEdit[format.ManifestEntry]{Key: name})
	}
	// The edits in name order, as the map applies them (sorted once, here). A
	// name listed twice is an error, named at its later listing.
	sorted := edits
	if !strictlyAscending(edits) {
		order := make([]int, len(edits))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(edits[a].Key, edits[b].Key) })
		sorted = make([]mapEdit[format.ManifestEntry], len(edits))
		for i, j := range order {
			if sorted[i] = edits[j]; i > 0 && sorted[i-1].Key == edits[j].Key {
				field := fmt.Sprintf("Put[%d]", j)
				if j >= len(spec.Put) {
					field = fmt.Sprintf("Delete[%d]", j-len(spec.Put))
				}
				return fail(invalidf(field, "%s listed twice", edits[j].Key))
			}
		}
	}
	base, err := g.versionOrEmpty(ctx, spec.Table, spec.Base)
	if err != nil {
		return fail(fmt.Errorf("read base: %w", err))
	}
	tree := g.manifestOf(base)
	plan := VersionPlan{}
	bytes := base.Bytes
	for _, e := range edits {
		old, had, err := tree.get(ctx, e.Key)
		if err != nil {
			return fail(err)
		}
		switch {
		case e.Entry == nil && !had:
			return fail(invalidf("Delete", "%s is not in base version %s", e.Key, spec.Base))
		case e.Entry == nil:
			plan.Removed++
			bytes -= old.Size
		case had:
			if *e.Entry != old { // the same entry put again changes nothing
				plan.Replaced++
			}
			bytes += e.Entry.Size - old.Size
		default:
			plan.Added++
			bytes += e.Entry.Size
		}
	}
	ref, chunks, err := tree.apply(ctx, sorted)
	if err != nil {
		return fail(err)
	}
	v := format.TableVersion{Table: spec.Table, ID: spec.VersionID, Entries: ref, Bytes: bytes, CreatedAt: spec.Time.UTC(), Op: spec.Op}
	if !spec.Base.IsZero() {
		v.Base, v.Added, v.Removed, v.Replaced = spec.Base, plan.Added, plan.Removed, plan.Replaced
	}
	body, err := format.EncodeTableVersion(v)
	if err != nil {
		return fail(invalidObject(err, map[string]string{"created_at": "Time", "op": "Op"}))
	}
	plan.Version, plan.Body, plan.Chunks = v, body, chunks
	plan.Key = format.TableVersionKey(g.Name, spec.Table, spec.VersionID)
	return plan, nil
}

// WriteVersion writes a plan's chunks, then the version, put-if-absent, so a
// version is never visible before its chunks; other bytes at its key (a ULID
// minted twice) are a *KeyTakenError.
func (g *Graph) WriteVersion(ctx context.Context, p VersionPlan) error {
	if err := g.PutChunks(ctx, p.Chunks); err != nil {
		return fmt.Errorf("write version %s: %w", p.Version.ID, err)
	}
	if err := putNew(ctx, g.S, p.Key, p.Body, false); err != nil {
		return fmt.Errorf("write version %s: %w", p.Version.ID, err)
	}
	return nil
}

// PutVersion plans and writes a version.
func (g *Graph) PutVersion(ctx context.Context, spec VersionSpec) (VersionPlan, error) {
	p, err := g.PlanVersion(ctx, spec)
	if err != nil {
		return VersionPlan{}, err
	}
	return p, g.WriteVersion(ctx, p)
}

// ErrExternalChanged reports an external object changed since its import.
var ErrExternalChanged = errors.New("graph: external object changed since it was imported")

// ImportRef names an existing object of the store to register by reference.
type ImportRef struct {
	Key  string // the object's key; never one a graph owns or may own (CheckImportKeys)
	Name string // the entry's name in the table; defaults to Key
}

// ImportEntries HEADs each referenced object in parallel and returns external
// entries with the size and ETag the store reports, copying nothing. A missing
// object is ErrNotFound; a key a graph owns or may own is invalid
// (CheckImportKeys), before any object is read.
func ImportEntries(ctx context.Context, s storage.Store, graph string, refs []ImportRef) ([]format.ManifestEntry, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return nil, invalid("Graph", err)
	}
	out := make([]format.ManifestEntry, len(refs))
	keys := make([]string, len(refs))
	for i, r := range refs {
		field := fmt.Sprintf("Refs[%d]", i)
		if err := storage.ValidateKey(r.Key); err != nil {
			return nil, invalid(field+".Key", err)
		}
		name := r.Name
		if name == "" {
			name = r.Key
		}
		if err := format.ValidateEntryName(name); err != nil {
			return nil, invalid(field+".Name", err)
		}
		if err := format.ValidateEntryName(r.Key); err != nil {
			return nil, invalid(field+".Key", err)
		}
		out[i], keys[i] = format.ManifestEntry{Name: name, External: r.Key}, r.Key
	}
	if err := CheckImportKeys(ctx, s, graph, keys, func(i int) string { return fmt.Sprintf("Refs[%d].Key", i) }); err != nil {
		return nil, err
	}
	if err := bounded.EachErr(len(out), parallelism, func(i int) error {
		info, err := s.Head(ctx, out[i].External)
		if err != nil {
			return fmt.Errorf("import %s: %w", out[i].External, err)
		}
		out[i].Size, out[i].ETag = info.Size, info.ETag
		return nil
	}); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b format.ManifestEntry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// CheckExternal reports ErrExternalChanged for a changed external object.
func CheckExternal(ctx context.Context, s storage.Store, e format.ManifestEntry) error {
	if !e.IsExternal() {
		return nil
	}
	info, err := s.Head(ctx, e.External)
	if err != nil {
		return fmt.Errorf("check external %s: %w", e.External, err)
	}
	if info.Size != e.Size || info.ETag != e.ETag {
		return fmt.Errorf("check external %s: %w: now %d bytes, ETag %s; imported as %d bytes, ETag %s",
			e.External, ErrExternalChanged, info.Size, info.ETag, e.Size, e.ETag)
	}
	return nil
}

// A graph owns its whole prefix, and only it (docs/format.md, *Ownership*).

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

// CheckInitPrefix lists a new graph's prefix and returns a *PrefixTakenError for
// the first key own (an interrupted run's keys) does not accept.
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
	if err := bounded.EachErr(len(records), parallelism, func(i int) error {
		_, err := s.Head(ctx, records[i])
		exists[i] = err == nil
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return fmt.Errorf("read graph record %s: %w", records[i], err)
		}
		return nil
	}); err != nil {
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
