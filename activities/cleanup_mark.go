package activities

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"go.temporal.io/sdk/temporal"

	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/workflows/contract"
)

// CleanupRunEndedError is the type of the non-retryable error a mark step returns when its
// run has ended (an earlier execution of the workflow finished it): the workflow ends conflict.
const CleanupRunEndedError = "CleanupRunEnded"

// condemnChunk bounds the entries of one CondemnedAdd call (one short transaction under the
// graph lock) and of one plan lookup.
const condemnChunk = 2000

// CleanupMarkTrees is the first phase of a cleanup mark: from the graph's roots in storage
// and the ledger it decides which commits of every tree stay, fences ref-less trees nobody
// can settle otherwise, keeps every commit a merge may read as its merge base, condemns the
// rest, and returns per table the versions kept commits pin, for CleanupMarkTable. It reads
// trees, then witnesses, then refs: a create writes its witness before its fork commit and
// its ref after, so a listed tree has its witness visible, and a ref that landed is seen.
func (a *Activities) CleanupMarkTrees(ctx context.Context, in CleanupMarkTreesInput) (CleanupMarkTreesResult, error) {
	m := &treeMark{
		in:         in,
		cat:        a.Catalog,
		s:          &countingStore{inner: a.Store},
		commits:    map[string]*graph.Commit{},
		unreadable: map[string]string{},
		sample:     planSample{max: in.MaxPlanKeys},
		res:        CleanupMarkTreesResult{Now: a.now().UTC(), Retained: map[string][]string{}},
	}
	if err := m.run(ctx); err != nil {
		return CleanupMarkTreesResult{}, markError(err, "mark trees of graph %q", in.Graph)
	}
	m.res.PlanKeys = m.sample.keys
	m.res.Requests = m.s.requests()
	return m.res, nil
}

type treeMark struct {
	in     CleanupMarkTreesInput
	cat    *catalog.Catalog
	s      *countingStore
	res    CleanupMarkTreesResult
	sample planSample

	pins       pinSet // the ledger's pins: read by a dry run, and to count merge bases
	trees      map[ulid.ULID][]treeCommit
	witnesses  map[string]*catalog.Incarnation // by tree ULID
	refs       map[ulid.ULID]treeFacts         // refs only: Witness unset
	tagged     map[string]bool                 // commit keys live tags name
	tagsBad    string                          // why tags could not all be read
	mergeBases map[string]bool                 // commit keys a merge of two of the run's heads may read

	g          *graph.Graph
	mu         sync.Mutex                    // guards commits
	commits    map[string]*graph.Commit      // decoded commits, by key; nil when missing
	unreadable map[string]string             // commit keys that do not decode, with why
	kept       []string                      // commit keys kept, whose pins are retained
	liveHeads  map[ulid.ULID]format.CommitID // the heads live refs name
	pinnedSeq  map[ulid.ULID]int64           // per tree, the lowest seq of a commit an operation pins
	origin     graphOrigin
}

// graphOrigin is what a mark reads of the graph record to tell the keys graft wrote for the
// graph from keys that only look like them (docs/format.md, *Ownership*).
type graphOrigin struct{ created time.Time }

// originULIDSkew is how far before the graph record's creation a ULID graft minted for
// the graph may name a time: ULIDs are minted on the writer's clock, not the ledger's.
const originULIDSkew = time.Hour

func readOrigin(ctx context.Context, s storage.Store, graphName string) (graphOrigin, error) {
	rec, err := graph.ReadGraph(ctx, s, graphName)
	if err != nil {
		return graphOrigin{}, fmt.Errorf("read graph record: %w", err)
	}
	return graphOrigin{created: rec.CreatedAt}, nil
}

// predates reports a key graft cannot have written for the graph: the store last modified
// it before the graph record was created (to the whole second, the coarsest time a store
// gives), or its ULID names a time more than originULIDSkew before that. Such a key is left
// alone and counted as unknown: predates only ever turns a deletion into a key left alone.
func (o graphOrigin) predates(modified time.Time, id ulid.ULID) bool {
	if o.created.IsZero() {
		return false
	}
	if !modified.IsZero() && modified.Before(o.created.Truncate(time.Second)) {
		return true
	}
	return id != (ulid.ULID{}) && ulid.Time(id.Time()).Before(o.created.Add(-originULIDSkew))
}

// foreignTree reports a tree whose id, or one of whose commit keys, predates the graph.
func (m *treeMark) foreignTree(t ulid.ULID, cs []treeCommit) bool {
	if m.origin.predates(time.Time{}, t) {
		return true
	}
	for _, c := range cs {
		if m.origin.predates(c.Modified, ulid.ULID{}) {
			return true
		}
	}
	return false
}

func (m *treeMark) listTrees(ctx context.Context) error {
	m.trees = map[ulid.ULID][]treeCommit{}
	tick := ticker(ctx)
	err := storage.ListAll(ctx, m.s, m.in.Graph+"/trees/", func(o storage.ObjectInfo) error {
		tick()
		id, err := format.ParseCommitKey(m.in.Graph, o.Key)
		if err != nil {
			m.res.Kept.Unknown++
			return nil
		}
		m.trees[id.Tree] = append(m.trees[id.Tree], treeCommit{Key: o.Key, Seq: id.Seq, Size: o.Size, Modified: o.LastModified})
		return nil
	})
	if err != nil {
		return fmt.Errorf("list trees: %w", err)
	}
	return nil
}

func (m *treeMark) readRefs(ctx context.Context) error {
	m.refs, m.liveHeads = map[ulid.ULID]treeFacts{}, map[ulid.ULID]format.CommitID{}
	return getListed(ctx, m.s, format.BranchRefsPrefix(m.in.Graph), "refs", func(key string, obj storage.Object, err error) error {
		native, perr := format.ParseBranchRefKey(m.in.Graph, key)
		if perr != nil || err != nil { // not a ref key of this format, or gone since the listing
			return nil
		}
		_, tree, _ := format.ParseNative(native)
		f := m.refs[tree]
		if ref, derr := format.DecodeBranchRef(obj.Body); derr != nil || ref.Native != native {
			f.RefUnreadable = true
		} else {
			f.Refs = append(f.Refs, ref)
			if ref.State == format.RefLive && !ref.Head.IsZero() {
				m.liveHeads[tree] = ref.Head
			}
		}
		m.refs[tree] = f
		return nil
	})
}

// readTags reads every tag; live tags are roots.
func (m *treeMark) readTags(ctx context.Context) error {
	m.tagged = map[string]bool{}
	return getListed(ctx, m.s, format.TagsPrefix(m.in.Graph), "tags", func(key string, obj storage.Object, err error) error {
		tag, derr := format.DecodeTag(obj.Body)
		switch {
		case err != nil: // deleted since the listing
		case derr != nil: // a tag we cannot read may name any commit: keep them all
			m.tagsBad = fmt.Sprintf("tag %s does not decode: %v", key, derr)
		case tag.State == format.TagLive:
			m.tagged[format.CommitIDKey(m.in.Graph, tag.Commit)] = true
		}
		return nil
	})
}

// listTables finds every table name under {graph}/tables/ with one LIST of one key per
// table: after each table it skips past all of that table's keys.
func listTables(ctx context.Context, s storage.Store, g string) ([]string, error) {
	prefix := g + "/tables/"
	var tables []string
	after := ""
	for {
		page, err := s.List(ctx, storage.ListOptions{Prefix: prefix, StartAfter: after, Limit: 1})
		if err != nil {
			return nil, fmt.Errorf("list tables: %w", err)
		}
		if len(page.Objects) == 0 {
			return tables, nil
		}
		key := page.Objects[0].Key
		rest := strings.TrimPrefix(key, prefix)
		name, _, ok := strings.Cut(rest, "/")
		if !ok {
			// A key directly under tables/: not a table; step past it.
			after = key
			continue
		}
		if format.ValidateTableName(name) == nil {
			tables = append(tables, name)
		}
		// Every key of the table starts with prefix+name+"/"; '0' sorts right after '/'.
		after = prefix + name + "0"
	}
}

// errUnreadable marks an object that exists but does not decode.
type errUnreadable struct{ err error }

func (e errUnreadable) Error() string { return e.err.Error() }
func (e errUnreadable) Unwrap() error { return e.err }

func unreadable(err error) bool {
	var bad errUnreadable
	return errors.As(err, &bad)
}

func (m *treeMark) keep(key string, counter *int64) {
	*counter++
	m.kept = append(m.kept, key)
}

func (m *treeMark) unsettled(t ulid.ULID, native, reason string, cs []treeCommit) {
	u := contract.UnsettledTree{Tree: t.String(), Native: native, Reason: reason, Commits: int64(len(cs))}
	if w := m.witnesses[t.String()]; w != nil {
		u.Native, u.State, u.OpID = w.Native, string(w.State), w.OpID
	}
	m.res.Unsettled = append(m.res.Unsettled, u)
}

// fence wins the ref key of a tree with no ref and no unsettled witness (a fence named by
// its newest commit's branch), so that no late put can ever publish it; only then may the
// tree be condemned. Losing to a live ref means the branch is live after all.
func (m *treeMark) fence(ctx context.Context, t ulid.ULID, cs []treeCommit) (treeClass, string, string, error) {
	c, err := m.newestCommit(ctx, t, cs)
	if m.in.Mode == CleanupModeDryRun {
		native := ""
		if c != nil {
			native = format.NativeName(c.Branch, t)
		}
		m.res.WouldFence = append(m.res.WouldFence, native)
		return treeCondemnable, native, "would be fenced", nil
	}
	switch {
	case unreadable(err):
		return treeUnsettled, "", "cannot learn the branch name: " + err.Error(), nil
	case err != nil:
		return 0, "", "", err
	case c == nil:
		return treeCondemnable, "", "its commits are gone", nil
	}
	native := format.NativeName(c.Branch, t)
	body, err := graph.FenceBytes(native, m.in.RunID, "cleanup")
	if err != nil {
		return treeUnsettled, native, "cannot encode a fence: " + err.Error(), nil
	}
	put, err := graph.PutIfAbsent(ctx, m.s, format.BranchRefKey(m.in.Graph, native), body)
	if err != nil {
		if ctx.Err() != nil {
			return 0, "", "", ctx.Err()
		}
		return treeUnsettled, native, "fence put unsettled: " + err.Error(), nil
	}
	if put.Outcome != graph.PutTaken {
		m.res.Fenced = append(m.res.Fenced, native)
		return treeCondemnable, native, "fenced by this run", nil
	}
	ref, derr := format.DecodeBranchRef(put.Existing)
	switch {
	case derr != nil:
		return treeUnsettled, native, "the ref key holds bytes that do not decode", nil
	case ref.State == format.RefLive:
		return treeLive, native, "a live ref landed before the fence", nil
	}
	return treeCondemnable, native, "already " + string(ref.State), nil
}

// markError names the mark step in its error, keeping a non-retryable ApplicationError so
// (wrapped by fmt.Errorf it would be retried and reach the workflow untyped).
func markError(err error, f string, args ...any) error {
	what := fmt.Sprintf(f, args...)
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.NonRetryable() {
		return temporal.NewNonRetryableApplicationError(what+": "+err.Error(), app.Type(), err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// CleanupMarkTable is the second phase of a cleanup mark, for one table: it condemns the
// versions no kept commit pins, then the data objects no kept version lists, each older than
// the guard window. Versions go first: one an operation pins meanwhile is refused to it or kept.
func (a *Activities) CleanupMarkTable(ctx context.Context, in CleanupMarkTableInput) (CleanupMarkTableResult, error) {
	s := &countingStore{inner: a.Store}
	res, err := markTable(ctx, a.Catalog, s, in)
	if err != nil {
		return CleanupMarkTableResult{}, markError(err, "mark table %q of graph %q", in.Table, in.Graph)
	}
	res.Requests = s.requests()
	return res, nil
}

// readCommits reads the commits at keys not read yet, several at a time, through the graph
// API (which checks a commit's key and digest). A missing commit is cached as nil; one that
// does not decode is recorded in m.unreadable.
func (m *treeMark) readCommits(ctx context.Context, keys []string) error {
	var need []string
	m.mu.Lock()
	for _, k := range keys {
		if _, ok := m.commits[k]; !ok {
			need = append(need, k)
			m.commits[k] = nil
		}
	}
	m.mu.Unlock()
	tick := ticker(ctx)
	var first error
	bounded.Each(len(need), getConcurrency, func(i int) {
		key := need[i]
		id, perr := format.ParseCommitKey(m.in.Graph, key)
		var c graph.Commit
		var err error
		if perr == nil {
			c, err = m.g.Commit(ctx, id)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		tick()
		switch {
		case perr != nil:
			m.unreadable[key] = perr.Error()
		case errors.Is(err, graph.ErrCommitNotFound):
		case err != nil && (errors.Is(err, graph.ErrCorrupt) || isUnreadableObject(err)):
			m.unreadable[key] = err.Error()
		case err != nil:
			if first == nil {
				first = err
			}
			delete(m.commits, key) // not read: a retry reads it again
		default:
			m.commits[key] = &c
		}
	})
	if first != nil {
		return fmt.Errorf("read commits: %w", first)
	}
	return nil
}

// commit returns the commit id names (nil when missing).
func (m *treeMark) commit(ctx context.Context, id format.CommitID) (*graph.Commit, error) {
	key := format.CommitIDKey(m.in.Graph, id)
	if err := m.readCommits(ctx, []string{key}); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if why, bad := m.unreadable[key]; bad {
		return nil, errUnreadable{fmt.Errorf("commit %s does not decode: %s", key, why)}
	}
	return m.commits[key], nil
}

func (m *treeMark) run(ctx context.Context) error {
	g, err := graph.Open(m.s, m.in.Graph)
	if err != nil {
		return err
	}
	m.g = g
	if m.origin, err = readOrigin(ctx, m.s, m.in.Graph); err != nil {
		return err
	}
	if m.pins, err = listPins(ctx, m.cat, m.in.Graph, m.in.RunID); err != nil {
		return err
	}
	if err := m.listTrees(ctx); err != nil {
		return err
	}
	// Pins read before the listing may name commits of trees listed now; a pin taken later
	// is the ledger's to refuse or keep (CondemnedAdd), and a chain it needs is the head's.
	m.pinnedSeq = map[ulid.ULID]int64{}
	for key := range m.pins {
		if id, err := format.ParseCommitKey(m.in.Graph, key); err == nil {
			if cur, ok := m.pinnedSeq[id.Tree]; !ok || id.Seq < cur {
				m.pinnedSeq[id.Tree] = id.Seq
			}
		}
	}
	incs, err := m.cat.IncarnationListByGraph(ctx, catalog.IncarnationListByGraphParams{Graph: m.in.Graph})
	if err != nil {
		return fmt.Errorf("list witnesses: %w", err)
	}
	m.witnesses = make(map[string]*catalog.Incarnation, len(incs))
	for i := range incs {
		m.witnesses[incs[i].Tree] = &incs[i]
	}
	if err := m.readRefs(ctx); err != nil {
		return err
	}
	if err := m.readTags(ctx); err != nil {
		return err
	}
	if m.res.Tables, err = listTables(ctx, m.s, m.in.Graph); err != nil {
		return err
	}
	candidates, err := m.decideTrees(ctx)
	if err != nil {
		return err
	}
	// Condemn (a dry run: plan) the candidates; pinned ones and ones the reviewed plan did
	// not list are kept, and their pins retained.
	c := m.condemner()
	c.batch = candidates
	if err := c.flush(ctx, func(catalog.Condemned) { m.res.Condemned.Commits++ }); err != nil {
		return err
	}
	m.kept = append(m.kept, c.stay...)
	return m.retainPins(ctx)
}

// decideTrees classifies every tree and returns the commits that may be condemned, in
// three passes: how each tree stands (fencing ref-less trees), which commits a merge may
// read as its merge base (from the heads of every tree that is or may become a branch),
// and only then which commits stay, a live tree's along its head's first-parent chain.
func (m *treeMark) decideTrees(ctx context.Context) ([]catalog.Condemned, error) {
	trees := slices.SortedFunc(maps.Keys(m.trees), func(a, b ulid.ULID) int { return a.Compare(b) })
	classes := make(map[ulid.ULID]treeClass, len(trees))
	reasons := make(map[ulid.ULID]string, len(trees))
	for _, t := range trees {
		slices.SortFunc(m.trees[t], func(a, b treeCommit) int { return cmp.Compare(b.Seq, a.Seq) }) // newest first
		f := m.refs[t]
		f.Witness = m.witnesses[t.String()]
		classes[t], reasons[t] = classifyTree(f)
	}
	// A tree no ref names and the ledger never witnessed, older than the graph, is not the
	// graph's at all: neither fenced nor condemned.
	trees = slices.DeleteFunc(trees, func(t ulid.ULID) bool {
		if classes[t] != treeNeedsFence || m.witnesses[t.String()] != nil || !m.foreignTree(t, m.trees[t]) {
			return false
		}
		m.res.Kept.Unknown += int64(len(m.trees[t]))
		return true
	})

	// Pass 1: fences.
	fenceTried := map[ulid.ULID]bool{}
	landed := map[ulid.ULID]bool{}
	for _, t := range trees {
		if classes[t] != treeNeedsFence {
			continue
		}
		fenceTried[t] = true
		cs := m.trees[t]
		class, native, reason, err := m.fence(ctx, t, cs)
		if err != nil {
			return nil, err
		}
		switch class {
		case treeUnsettled:
			m.unsettled(t, native, reason, cs)
		case treeLive:
			landed[t] = true
		}
		classes[t], reasons[t] = class, reason
	}

	// The head of every tree that is or may become a branch.
	heads := map[ulid.ULID]*graph.Commit{}
	for _, t := range trees {
		if c := classes[t]; c != treeLive && c != treeInFlight && c != treeUnsettled {
			continue
		}
		var c *graph.Commit
		var err error
		if id, ok := m.liveHeads[t]; ok && !landed[t] {
			c, err = m.commit(ctx, id)
		} else {
			c, err = m.newestCommit(ctx, t, m.trees[t])
		}
		switch {
		case unreadable(err):
			if classes[t] == treeLive {
				classes[t], reasons[t] = treeUnsettled, "its head does not decode: "+err.Error()
				m.unsettled(t, "", reasons[t], m.trees[t])
				fenceTried[t] = true
			}
			continue
		case err != nil:
			return nil, err
		}
		if c != nil {
			heads[t] = c
		}
	}

	// Pass 2: merge bases.
	if err := m.findMergeBases(ctx, trees, heads); err != nil {
		return nil, err
	}

	// Pass 3: keep or condemn each commit.
	var cutoff time.Time
	if m.in.KeepNewerThan > 0 {
		cutoff = m.res.Now.Add(-m.in.KeepNewerThan)
	}
	young := m.res.Now.Add(-m.in.GuardWindow)
	var candidates []catalog.Condemned
	var baseKept []string
	candidate := func(c treeCommit) {
		switch {
		case m.tagsBad != "":
			m.keep(c.Key, &m.res.Kept.Unsettled)
		case m.tagged[c.Key]:
			m.keep(c.Key, &m.res.Kept.Tag)
		case m.mergeBases[c.Key]:
			baseKept = append(baseKept, c.Key)
		default:
			candidates = append(candidates, catalog.Condemned{Key: c.Key, Kind: catalog.ObjectCommit, Size: c.Size})
		}
	}
	for _, t := range trees {
		cs := m.trees[t]
		switch classes[t] {
		case treeLive:
			head := heads[t]
			if landed[t] || head == nil {
				// A ref that landed while this run decided, or a head that is gone: keep the
				// whole tree; the next run applies the policy.
				m.keep(cs[0].Key, &m.res.Kept.Head) // cs is newest first, never empty
				for _, c := range cs[1:] {
					m.keep(c.Key, &m.res.Kept.LiveWindow)
				}
				continue
			}
			decided, below, err := m.chainDecisions(ctx, t, *head, cutoff)
			if err != nil {
				return nil, err
			}
			for _, c := range cs {
				counter, onChain := decided[c.Key]
				delete(decided, c.Key)
				switch {
				case onChain && counter != nil:
					m.keep(c.Key, counter)
				case onChain:
					candidate(c)
				case below >= 0 && c.Seq < below:
					// Under a chain commit that does not decode: nothing below it is decided.
					m.keep(c.Key, &m.res.Kept.Unsettled)
				case c.Seq > head.ID.Seq && c.Modified.After(young):
					// Above the head and young: a plan a data-plane writer may still publish.
					m.keep(c.Key, &m.res.Kept.Guard)
				default:
					// Off the chain (a plan whose swap lost), or on it below every window.
					candidate(c)
				}
			}
			// A chain commit this run keeps but did not list (the head a publish swapped in
			// after the listing, above all) is kept all the same: what it pins is retained,
			// or a sweep would reclaim versions the branch's head names.
			for key, counter := range decided {
				if counter != nil {
					m.keep(key, counter)
				}
			}
		case treeCondemnable:
			for _, c := range cs {
				candidate(c)
			}
		case treeInFlight, treeUnsettled:
			// Kept and reported unsettled (an unsettled tree only if no fence tried this run
			// reported it already).
			counter := &m.res.Kept.InFlightTree
			if classes[t] == treeUnsettled {
				counter = &m.res.Kept.Unsettled
			}
			if classes[t] == treeInFlight || !fenceTried[t] {
				m.unsettled(t, "", reasons[t], cs)
			}
			for _, c := range cs {
				m.keep(c.Key, counter)
			}
		}
	}
	// The merge-base candidates no window or tag kept; one an operation pins (per the pins
	// read when the mark began: these never reach the ledger's check) counts as pinned.
	for _, k := range baseKept {
		if m.pins.pinned(k) {
			m.keep(k, &m.res.Kept.Pin)
		} else {
			m.keep(k, &m.res.Kept.MergeBase)
		}
	}
	return candidates, nil
}

// chainDecisions walks a live tree's first-parent chain from its head, as far as a window
// or an in-flight pin needs, and maps each commit to the counter of the root that keeps it,
// or nil outside every window. below is the seq of a chain commit that does not decode
// (what is under it stays undecided and kept), or -1.
func (m *treeMark) chainDecisions(ctx context.Context, t ulid.ULID, head graph.Commit, cutoff time.Time) (map[string]*int64, int64, error) {
	out := map[string]*int64{}
	lowPin, pinned := m.pinnedSeq[t]
	cur := head
	for i := 0; ; i++ {
		key := format.CommitIDKey(m.in.Graph, cur.ID)
		switch {
		case i == 0:
			out[key] = &m.res.Kept.Head
		case i < m.in.KeepNewest:
			out[key] = &m.res.Kept.LiveWindow
		case !cutoff.IsZero() && cur.Time.After(cutoff):
			out[key] = &m.res.Kept.LiveWindow
		case pinned && cur.ID.Seq >= lowPin:
			out[key] = &m.res.Kept.Pin
		default:
			out[key] = nil
		}
		need := i+1 < m.in.KeepNewest || !cutoff.IsZero() || (pinned && cur.ID.Seq > lowPin)
		p := cur.FirstParent()
		if !need || cur.ID.Seq == 0 || p.IsZero() || p.Tree != t {
			return out, -1, nil
		}
		next, err := m.commit(ctx, p)
		switch {
		case unreadable(err):
			return out, p.Seq + 1, nil
		case err != nil:
			return nil, 0, err
		case next == nil:
			return out, -1, nil // reclaimed below here by an earlier run
		}
		cur = *next
	}
}

// newestCommit reads the tree's newest listed commit that still exists (nil when none does).
func (m *treeMark) newestCommit(ctx context.Context, t ulid.ULID, cs []treeCommit) (*graph.Commit, error) {
	for _, c := range cs {
		id, err := format.ParseCommitKey(m.in.Graph, c.Key)
		if err != nil {
			continue
		}
		got, err := m.commit(ctx, id)
		if err != nil {
			return nil, err
		}
		if got != nil {
			if got.ID.Tree != t {
				return nil, errUnreadable{fmt.Errorf("commit at %s names tree %s", c.Key, got.ID.Tree)}
			}
			return got, nil
		}
	}
	return nil, nil
}

// findMergeBases records in m.mergeBases every commit a merge of two of heads may read:
// the candidates of each pair (per tree, every position but a highest one only one head
// holds) and the forks up each head's chain of forks (read to rule candidates out).
func (m *treeMark) findMergeBases(ctx context.Context, trees []ulid.ULID, heads map[ulid.ULID]*graph.Commit) error {
	m.mergeBases = map[string]bool{}
	byTree := map[ulid.ULID][]format.CommitID{}
	forks := map[format.CommitID]bool{}
	for _, t := range trees {
		h := heads[t]
		if h == nil {
			continue
		}
		byTree[h.ID.Tree] = append(byTree[h.ID.Tree], h.ID)
		err := m.g.EachLineage(ctx, *h, func(e format.LineageEntry) error {
			byTree[e.Tree] = append(byTree[e.Tree], e.ID())
			return nil
		})
		if err != nil {
			return fmt.Errorf("read lineage of head %s: %w", h.ID, err)
		}
		fork := h.Fork
		for i := 0; i < maxForkProbes && !fork.IsZero() && !forks[fork]; i++ {
			forks[fork] = true
			m.mergeBases[format.CommitIDKey(m.in.Graph, fork)] = true
			c, err := m.commit(ctx, fork)
			if unreadable(err) || c == nil {
				break
			}
			if err != nil {
				return err
			}
			fork = c.Fork
		}
	}
	for _, ids := range byTree {
		if len(ids) < 2 {
			continue
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i].Seq < ids[j].Seq })
		top := ids[len(ids)-1]
		topShared := ids[len(ids)-2].Seq == top.Seq
		for _, id := range ids {
			if id.Seq == top.Seq && !topShared {
				continue
			}
			m.mergeBases[format.CommitIDKey(m.in.Graph, id)] = true
		}
	}
	return nil
}

const maxForkProbes = 8 // how far up a chain of forks the merge-base search reads (as graph's)

// retainPins marks every kept commit's pins and lineage chunks, collecting per table the
// versions it pins, then condemns the pins and lineage chunks no kept commit reaches.
func (m *treeMark) retainPins(ctx context.Context) error {
	if m.tagsBad != "" {
		m.res.RetainAllData, m.res.RetainAllReason = true, m.tagsBad
	}
	if err := m.readCommits(ctx, m.kept); err != nil {
		return err
	}
	retained := map[string]map[string]bool{}
	chunks := map[string]bool{}
	marker := m.g.NewMarker(func(mk graph.Mark) error {
		switch mk.Kind {
		case graph.MarkPinsChunk, graph.MarkLineageChunk:
			chunks[mk.Key] = true
		}
		return nil
	})
	tick := ticker(ctx)
	for _, k := range m.kept {
		if why, bad := m.unreadable[k]; bad {
			if !m.res.RetainAllData {
				m.res.RetainAllData, m.res.RetainAllReason = true, fmt.Sprintf("kept commit %s does not decode: %s", k, why)
			}
			continue
		}
		c := m.commits[k]
		if c == nil {
			continue
		}
		err := marker.CommitOnly(ctx, *c, func(p format.PinEntry) error {
			tick()
			if retained[p.Table] == nil {
				retained[p.Table] = map[string]bool{}
			}
			retained[p.Table][p.Version.String()] = true
			return nil
		})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !m.res.RetainAllData {
				m.res.RetainAllData, m.res.RetainAllReason = true, fmt.Sprintf("kept commit %s: %v", k, err)
			}
		}
	}
	for table, vs := range retained {
		m.res.Retained[table] = slices.Sorted(maps.Keys(vs))
	}

	// The pins and lineage chunks no kept commit reaches, older than the guard window.
	prefix := format.ChunksPrefix(m.in.Graph)
	return m.condemner().judge(ctx, m.s, judged{what: "chunks", prefix: prefix, parse: chunkKey(prefix), retainAll: m.res.RetainAllData,
		referenced: func(k string, _ ulid.ULID) bool { return chunks[k] }, young: m.res.Now.Add(-m.in.GuardWindow), origin: m.origin,
		counted: func(catalog.Condemned) { m.res.Condemned.Objects++; m.res.GraphChunks++ }})
}

func (m *treeMark) condemner() *condemner {
	return &condemner{cat: m.cat, runID: m.in.RunID, mode: m.in.Mode, planRunID: m.in.PlanRunID, pins: m.pins,
		kept: &m.res.Kept, condemned: &m.res.Condemned, notInPlan: &m.res.NotInPlan, sample: &m.sample}
}

// condemner condemns listed garbage in batches (flush): keys an operation pins count as
// kept by a pin, keys the reviewed plan did not list as not in the plan, both added to
// stay; accepted keys count in condemned and are sampled for the plan.
type condemner struct {
	cat                    *catalog.Catalog
	runID, mode, planRunID string
	pins                   pinSet
	kept                   *contract.CleanupKept
	condemned              *contract.CleanupCounts
	notInPlan              *int64
	sample                 *planSample
	batch                  []catalog.Condemned
	stay                   []string
	tick                   func()
}

// flush hands the batch to the ledger in chunks of condemnChunk, telling counted of each
// entry condemned. A dry run condemns nothing: it checks the pins itself.
func (c *condemner) flush(ctx context.Context, counted func(catalog.Condemned)) error {
	for start := 0; start < len(c.batch); start += condemnChunk {
		chunk := c.batch[start:min(start+condemnChunk, len(c.batch))]
		if c.planRunID != "" {
			keys := mapped(chunk, func(e catalog.Condemned) string { return e.Key })
			inPlan, err := c.cat.CondemnedAmong(ctx, catalog.CondemnedAmongParams{RunID: c.planRunID, Keys: keys})
			if err != nil {
				return fmt.Errorf("read reviewed plan: %w", err)
			}
			planned := setOf(inPlan)
			chunk = slices.DeleteFunc(slices.Clone(chunk), func(e catalog.Condemned) bool {
				if !planned[e.Key] {
					*c.notInPlan++
					c.stay = append(c.stay, e.Key)
				}
				return !planned[e.Key]
			})
		}
		pinned := c.pins.pinned
		if c.mode != CleanupModeDryRun {
			if len(chunk) == 0 {
				continue
			}
			res, err := c.cat.CondemnedAdd(ctx, catalog.CondemnedAddParams{RunID: c.runID, Entries: chunk})
			if errors.Is(err, catalog.ErrStateConflict) {
				// The run ended (an earlier execution of this workflow finished it before an
				// operator reset it): retrying cannot help.
				return temporal.NewNonRetryableApplicationError(
					fmt.Sprintf("cleanup run %s has ended: %v", c.runID, err), CleanupRunEndedError, err)
			}
			if err != nil {
				return fmt.Errorf("condemn: %w", err)
			}
			refused := setOf(res.SkippedPinned)
			pinned = func(key string) bool { return refused[key] }
			heartbeat(ctx)
		}
		for _, e := range chunk {
			if pinned(e.Key) {
				c.kept.Pin++
				c.stay = append(c.stay, e.Key)
			} else {
				counted(e)
				c.condemned.Bytes += e.Size
				c.sample.add(e.Key)
			}
		}
	}
	c.batch = c.batch[:0]
	return nil
}

// judged is one listing a mark decides key by key (docs/format.md, *Cleanup*).
type judged struct {
	what, prefix string
	// parse returns the ULID a key names (zero for a chunk); false: not a key graft writes.
	parse      func(key string) (ulid.ULID, bool)
	retainAll  bool
	referenced func(key string, id ulid.ULID) bool
	young      time.Time
	origin     graphOrigin
	kind       catalog.ObjectKind // defaults to catalog.ObjectData
	counted    func(catalog.Condemned)
	// kept, when set, is told each id kept as unsettled, referenced or guarded.
	kept func(ulid.ULID)
}

// judge lists j.prefix and counts each key under the first root that keeps it (unknown
// when not graft's, unsettled, referenced, guard when younger than j.young, unknown when
// older than the graph) and condemns the rest.
func (c *condemner) judge(ctx context.Context, s storage.Store, j judged) error {
	kind := cmp.Or(j.kind, catalog.ObjectData)
	err := storage.ListAll(ctx, s, j.prefix, func(o storage.ObjectInfo) error {
		if c.tick != nil {
			c.tick()
		}
		id, ok := j.parse(o.Key)
		var counter *int64
		switch {
		case !ok:
			c.kept.Unknown++
			return nil
		case j.retainAll:
			counter = &c.kept.Unsettled
		case j.referenced(o.Key, id):
			counter = &c.kept.Referenced
		case o.LastModified.After(j.young):
			counter = &c.kept.Guard
		case j.origin.predates(o.LastModified, id):
			c.kept.Unknown++
			return nil
		default:
			c.batch = append(c.batch, catalog.Condemned{Key: o.Key, Kind: kind, Size: o.Size})
			if len(c.batch) >= condemnChunk {
				return c.flush(ctx, j.counted)
			}
			return nil
		}
		*counter++
		if j.kept != nil {
			j.kept(id)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list %s: %w", j.what, err)
	}
	return c.flush(ctx, j.counted)
}

// chunkKey parses the keys of a chunk prefix; a chunk names no ULID.
func chunkKey(prefix string) func(string) (ulid.ULID, bool) {
	return func(key string) (ulid.ULID, bool) {
		_, err := format.ParseChunkKey(prefix, key)
		return ulid.ULID{}, err == nil
	}
}

// markTable decides one table's versions, manifest chunks, then objects, each condemned
// only after what could name it was decided.
func markTable(ctx context.Context, cat *catalog.Catalog, s storage.Store, in CleanupMarkTableInput) (CleanupMarkTableResult, error) {
	var res CleanupMarkTableResult
	sample := planSample{max: in.MaxPlanKeys}
	g, err := graph.Open(s, in.Graph)
	if err != nil {
		return res, err
	}
	var pins pinSet
	if in.Mode == CleanupModeDryRun {
		if pins, err = listPins(ctx, cat, in.Graph, in.RunID); err != nil {
			return res, err
		}
	}
	origin, err := readOrigin(ctx, s, in.Graph)
	if err != nil {
		return res, err
	}
	young := in.Now.Add(-in.GuardWindow)
	retained := setOf(in.Retained)
	tick := ticker(ctx)
	c := &condemner{cat: cat, runID: in.RunID, mode: in.Mode, planRunID: in.PlanRunID, pins: pins,
		kept: &res.Kept, condemned: &res.Condemned, notInPlan: &res.NotInPlan, sample: &sample, tick: tick}

	// Versions. Pinned versions stay, and so do versions the reviewed plan did not list.
	vprefix := format.TableVersionsPrefix(in.Graph, in.Table)
	var keptVersions []ulid.ULID
	err = c.judge(ctx, s, judged{what: "versions", prefix: vprefix, kind: catalog.ObjectTableVersion,
		parse:      func(k string) (ulid.ULID, bool) { return parseIDKey(vprefix, ".json", k) },
		retainAll:  in.RetainAll,
		referenced: func(_ string, id ulid.ULID) bool { return retained[id.String()] },
		young:      young, origin: origin,
		counted: func(catalog.Condemned) { res.Condemned.Versions++ },
		kept:    func(id ulid.ULID) { keptVersions = append(keptVersions, id) }})
	if err != nil {
		return res, err
	}
	for _, k := range c.stay {
		if id, ok := parseIDKey(vprefix, ".json", k); ok {
			keptVersions = append(keptVersions, id)
		}
	}

	// Mark every kept version: its manifest chunks exactly, its objects in a filter.
	retainAll := in.RetainAll
	var versions []graph.Version
	total := 0
	for _, id := range keptVersions {
		tick()
		v, err := g.Version(ctx, in.Table, id)
		switch {
		case errors.Is(err, graph.ErrVersionNotFound):
			continue // deleted by someone else since the listing: names nothing now
		case err != nil:
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			retainAll = true // cannot tell what it names: keep every chunk and object
			continue
		}
		versions = append(versions, v)
		total += int(v.Len())
	}
	chunks := map[string]bool{}
	filter := graph.NewObjectFilter(total, 1e-6, in.Seed)
	marker := g.NewMarker(func(mk graph.Mark) error {
		switch mk.Kind {
		case graph.MarkManifestChunk:
			chunks[mk.Key] = true
		case graph.MarkObject:
			tick()
			filter.Add(mk.Key)
		case graph.MarkExternal:
			res.External++
		}
		return nil
	})
	if !retainAll {
		for _, v := range versions {
			if err := marker.Version(ctx, in.Table, v.ID); err != nil {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				retainAll = true
				break
			}
		}
	}

	// Manifest chunks, then the data objects graft wrote.
	cprefix := format.TableChunksPrefix(in.Graph, in.Table)
	err = c.judge(ctx, s, judged{what: "chunks", prefix: cprefix, parse: chunkKey(cprefix), retainAll: retainAll,
		referenced: func(k string, _ ulid.ULID) bool { return chunks[k] }, young: young, origin: origin,
		counted: func(catalog.Condemned) { res.Condemned.Objects++; res.Chunks++ }})
	if err != nil {
		return res, err
	}
	oprefix := format.TableObjectsPrefix(in.Graph, in.Table)
	err = c.judge(ctx, s, judged{what: "objects", prefix: oprefix, retainAll: retainAll,
		parse:      func(k string) (ulid.ULID, bool) { return parseIDKey(oprefix, "", k) },
		referenced: func(k string, _ ulid.ULID) bool { return filter.MayContain(k) }, young: young, origin: origin,
		counted: func(catalog.Condemned) { res.Condemned.Objects++ }})
	if err != nil {
		return res, err
	}
	res.PlanKeys = sample.keys
	return res, nil
}
