package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"go.temporal.io/sdk/temporal"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// CleanupRunEndedError is the type of the non-retryable error a mark step returns when
// its run has ended (finished by an earlier execution of the same workflow, which an
// operator then reset): the workflow ends conflict instead of failing.
const CleanupRunEndedError = "CleanupRunEnded"

// condemnChunk bounds the entries of one CondemnedAdd call (one short transaction under
// the graph lock) and of one plan lookup.
const condemnChunk = 2000

// CleanupMarkTrees is the first phase of a cleanup mark: it reads the graph's roots from
// storage and the ledger, decides for every tree which commits stay, fences ref-less
// trees nobody can settle otherwise, keeps every commit a merge between two branches may
// read as its merge base, and condemns the rest of the commits. It returns, per table,
// the versions kept commits pin, for CleanupMarkTable.
//
// It reads in this order, after the run was inserted: trees, then witnesses, then refs.
// A create writes its witness before its fork commit and its ref after, so a tree seen
// in the listing has its witness visible, and a ref that landed meanwhile is seen.
func (a *Activities) CleanupMarkTrees(ctx context.Context, in CleanupMarkTreesInput) (CleanupMarkTreesResult, error) {
	m := &treeMark{
		in:         in,
		cat:        a.Catalog,
		s:          &countingStore{inner: a.Store},
		commits:    map[string]*format.Commit{},
		unreadable: map[string]string{},
		sample:     planSample{max: in.MaxPlanKeys},
		res:        CleanupMarkTreesResult{Now: a.now().UTC(), Retained: map[string][]string{}},
	}
	run := m.run
	if in.Format == format.Version2 {
		run = m.runV2
	}
	if err := run(ctx); err != nil {
		return CleanupMarkTreesResult{}, markError(err, "mark trees of graph %q", in.Graph)
	}
	m.res.PlanKeys = m.sample.keys
	m.res.Requests = m.s.requests()
	return m.res, nil
}

// treeMark is one CleanupMarkTrees call's state.
type treeMark struct {
	in     CleanupMarkTreesInput
	cat    *catalog.Catalog
	s      *countingStore
	res    CleanupMarkTreesResult
	sample planSample

	pins      pinSet // the ledger's pins: read by a dry run, and to count merge bases
	trees     map[ulid.ULID][]treeCommit
	witnesses map[string]*catalog.Incarnation // by tree ULID
	refs      map[ulid.ULID]*treeFacts
	tagged    map[string]bool // commit keys live tags name
	tagsBad   string          // why tags could not all be read
	// mergeBases are the commit keys a merge between two of the run's heads may read as
	// merge-base candidates.
	mergeBases map[string]bool

	commits    map[string]*format.Commit // decoded commits, by key; nil when missing or unreadable
	v2         *treeMarkV2               // format 2's state (cleanup_v2.go); nil for format 1
	unreadable map[string]string         // commit keys that do not decode, with why
	kept       []string                  // commit keys kept, whose pins are retained
}

func (m *treeMark) dryRun() bool { return m.in.Mode == CleanupModeDryRun }

// decodeRef decodes a branch ref: format 1 only in a format-1 graph; either format in a
// format-2 graph (an upgraded graph keeps its format-1 retired refs and fences).
func (m *treeMark) decodeRef(b []byte) (format.BranchRef, error) {
	if m.v2 == nil {
		return format.DecodeBranchRef(b)
	}
	r, _, err := format.DecodeBranchRefAny(b)
	return r, err
}

// decodeTag decodes a tag, of either format in a format-2 graph.
func (m *treeMark) decodeTag(b []byte) (format.Tag, error) {
	if m.v2 == nil {
		return format.DecodeTag(b)
	}
	t, _, err := format.DecodeTagAny(b)
	return t, err
}

func (m *treeMark) run(ctx context.Context) error {
	g := m.in.Graph
	if m.dryRun() {
		pins, err := m.cat.PinsList(ctx, catalog.PinsListParams{Graph: g, RunID: m.in.RunID})
		if err != nil {
			return fmt.Errorf("list pins: %w", err)
		}
		m.pins = newPinSet(pins)
	}
	if err := m.listTrees(ctx); err != nil {
		return err
	}
	incs, err := m.cat.IncarnationListByGraph(ctx, catalog.IncarnationListByGraphParams{Graph: g})
	if err != nil {
		return fmt.Errorf("list witnesses: %w", err)
	}
	m.witnesses = make(map[string]*catalog.Incarnation, len(incs))
	for i := range incs {
		m.witnesses[incs[i].Tree] = &incs[i] // oldest first: the newest row of a tree wins
	}
	if err := m.readRefs(ctx); err != nil {
		return err
	}
	if err := m.readTags(ctx); err != nil {
		return err
	}
	if m.res.Tables, err = listTables(ctx, m.s, g); err != nil {
		return err
	}
	candidates, err := m.decideTrees(ctx)
	if err != nil {
		return err
	}
	if err := m.condemn(ctx, candidates); err != nil {
		return err
	}
	return m.retainPins(ctx)
}

// listTrees lists every commit key under {graph}/trees/, grouped by tree.
func (m *treeMark) listTrees(ctx context.Context) error {
	m.trees = map[ulid.ULID][]treeCommit{}
	n := 0
	err := storage.ListAll(ctx, m.s, m.in.Graph+"/trees/", func(o storage.ObjectInfo) error {
		if n++; n%1000 == 0 {
			heartbeat(ctx, nil)
		}
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

// readRefs reads every branch ref of the graph: live, retired and fence.
func (m *treeMark) readRefs(ctx context.Context) error {
	m.refs = map[ulid.ULID]*treeFacts{}
	var keys []string
	err := storage.ListAll(ctx, m.s, format.BranchRefsPrefix(m.in.Graph), func(o storage.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	})
	if err != nil {
		return fmt.Errorf("list refs: %w", err)
	}
	facts := func(tree ulid.ULID) *treeFacts {
		f := m.refs[tree]
		if f == nil {
			f = &treeFacts{}
			m.refs[tree] = f
		}
		return f
	}
	err = getEach(ctx, m.s, keys, func(key string, obj storage.Object, err error) error {
		native, perr := format.ParseBranchRefKey(m.in.Graph, key)
		if perr != nil {
			return nil // not a ref key of this format: names no tree
		}
		_, tree, _ := format.ParseNative(native)
		if err != nil { // gone since the listing; graft never deletes refs
			return nil
		}
		ref, derr := m.decodeRef(obj.Body)
		if derr != nil || ref.Native != native {
			facts(tree).RefUnreadable = true
			return nil
		}
		f := facts(tree)
		f.Refs = append(f.Refs, ref)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read refs: %w", err)
	}
	return nil
}

// readTags reads every tag; live tags are roots.
func (m *treeMark) readTags(ctx context.Context) error {
	m.tagged = map[string]bool{}
	var keys []string
	err := storage.ListAll(ctx, m.s, format.TagsPrefix(m.in.Graph), func(o storage.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	})
	if err != nil {
		return fmt.Errorf("list tags: %w", err)
	}
	err = getEach(ctx, m.s, keys, func(key string, obj storage.Object, err error) error {
		if err != nil {
			return nil // deleted since the listing
		}
		tag, derr := m.decodeTag(obj.Body)
		if derr != nil {
			// A tag we cannot read may name any commit: keep them all.
			m.tagsBad = fmt.Sprintf("tag %s does not decode: %v", key, derr)
			return nil
		}
		if tag.State == format.TagLive {
			m.tagged[format.CommitIDKey(m.in.Graph, tag.Commit)] = true
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read tags: %w", err)
	}
	return nil
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

// readCommits GETs the commits at keys not yet cached. A missing commit is cached as
// nil; one that does not decode is recorded in m.unreadable (and cached as nil): the run
// keeps what it cannot read instead of failing.
func (m *treeMark) readCommits(ctx context.Context, keys []string) error {
	var need []string
	for _, k := range keys {
		if _, ok := m.commits[k]; !ok {
			need = append(need, k)
		}
	}
	return getEach(ctx, m.s, need, func(key string, obj storage.Object, err error) error {
		m.commits[key] = nil
		if err != nil {
			return nil
		}
		c, derr := format.DecodeCommit(obj.Body)
		if derr != nil {
			m.unreadable[key] = derr.Error()
			return nil
		}
		m.commits[key] = &c
		return nil
	})
}

// errUnreadable marks an object that exists but does not decode.
type errUnreadable struct{ err error }

func (e errUnreadable) Error() string { return e.err.Error() }
func (e errUnreadable) Unwrap() error { return e.err }

// keep records a kept commit whose pins stay retained.
func (m *treeMark) keep(key string, counter *int64) {
	*counter++
	m.kept = append(m.kept, key)
}

// decideTrees classifies every tree and returns the commits that may be condemned.
//
// It decides in three passes: first how each tree stands (fencing ref-less trees), then
// which commits a merge between two branches may read as its merge base — from the heads
// of every tree that is or may become a branch — and only then which commits stay.
func (m *treeMark) decideTrees(ctx context.Context) ([]catalog.Condemned, error) {
	trees := make([]ulid.ULID, 0, len(m.trees))
	for t := range m.trees {
		trees = append(trees, t)
	}
	slices.SortFunc(trees, func(a, b ulid.ULID) int { return a.Compare(b) })

	classes := make(map[ulid.ULID]treeClass, len(trees))
	reasons := make(map[ulid.ULID]string, len(trees))
	var needTimes []string
	for _, t := range trees {
		sortNewestFirst(m.trees[t])
		f := treeFacts{Witness: m.witnesses[t.String()]}
		if r := m.refs[t]; r != nil {
			f.Refs, f.RefUnreadable = r.Refs, r.RefUnreadable
		}
		classes[t], reasons[t] = classifyTree(f)
		if classes[t] == treeLive && m.in.KeepNewerThan > 0 {
			for i, c := range m.trees[t] {
				if i > 0 && i >= m.in.KeepNewest {
					needTimes = append(needTimes, c.Key)
				}
			}
		}
	}
	if err := m.readCommits(ctx, needTimes); err != nil {
		return nil, err
	}

	// Pass 1: settle every tree that needs a fence.
	fenceTried := map[ulid.ULID]bool{} // pass 1 reported a failed fence itself
	landed := map[ulid.ULID]bool{}     // the ref landed while this run decided
	for _, t := range trees {
		if classes[t] != treeNeedsFence {
			continue
		}
		fenceTried[t] = true
		cs := m.trees[t]
		var class treeClass
		var native, reason string
		if m.dryRun() {
			class, native, reason = treeCondemnable, m.nativeOf(ctx, t, cs), "would be fenced"
			m.res.WouldFence = append(m.res.WouldFence, native)
		} else {
			var err error
			if class, native, reason, err = m.fence(ctx, t, cs); err != nil {
				return nil, err
			}
		}
		switch class {
		case treeUnsettled:
			m.unsettled(t, native, reason, cs)
		case treeLive:
			landed[t] = true
		}
		classes[t], reasons[t] = class, reason
	}

	// Pass 2: the merge-base candidates of the heads of every tree that is, or may yet
	// become, a branch.
	if err := m.findMergeBases(ctx, trees, classes); err != nil {
		return nil, err
	}

	// Pass 3: keep or condemn each commit.
	var cutoff time.Time
	if m.in.KeepNewerThan > 0 {
		cutoff = m.res.Now.Add(-m.in.KeepNewerThan)
	}
	var candidates []catalog.Condemned
	var baseKept []string // merge-base candidates no window or tag kept
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
			if landed[t] {
				// The ref landed while this run decided: the branch is live and the
				// policy applies from the next run, which sees the ref among its roots.
				for i, c := range cs {
					if i == 0 {
						m.keep(c.Key, &m.res.Kept.Head)
					} else {
						m.keep(c.Key, &m.res.Kept.LiveWindow)
					}
				}
				continue
			}
			decisions := liveWindow(cs, m.in.KeepNewest, cutoff, func(i int) (time.Time, bool) {
				c := m.commits[cs[i].Key]
				if c == nil {
					return time.Time{}, false // unreadable (kept) or gone (nothing to delete)
				}
				return c.Time, true
			})
			for i, c := range cs {
				switch decisions[i] {
				case windowHead:
					m.keep(c.Key, &m.res.Kept.Head)
				case windowInside:
					m.keep(c.Key, &m.res.Kept.LiveWindow)
				default:
					candidate(c)
				}
			}
		default:
			m.decideNotLive(t, classes[t], reasons[t], fenceTried[t], cs, candidate)
		}
	}
	if err := m.keepMergeBases(ctx, baseKept); err != nil {
		return nil, err
	}
	return candidates, nil
}

// decideNotLive decides the commits of a tree that is not live, in either format: a
// condemnable tree's are candidates; an in-flight or unsettled tree's are kept, and
// reported unsettled (an unsettled one only if no fence was tried on it this run,
// which reported it already).
func (m *treeMark) decideNotLive(t ulid.ULID, class treeClass, reason string, fenceTried bool, cs []treeCommit, candidate func(treeCommit)) {
	switch class {
	case treeCondemnable:
		for _, c := range cs {
			candidate(c)
		}
	case treeInFlight:
		m.unsettled(t, "", reason, cs)
		for _, c := range cs {
			m.keep(c.Key, &m.res.Kept.InFlightTree)
		}
	case treeUnsettled:
		if !fenceTried {
			m.unsettled(t, "", reason, cs)
		}
		for _, c := range cs {
			m.keep(c.Key, &m.res.Kept.Unsettled)
		}
	}
}

// keepMergeBases keeps the merge-base candidates no window or tag kept, counting one
// that an operation pins as pinned: pin is the earlier root. They never reach the
// ledger's condemned set, so its own pin check cannot tell; the ledger's pin list
// (the dry run's, or one read here) does. It only attributes the count: each key is kept
// either way.
func (m *treeMark) keepMergeBases(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	if m.pins.exact == nil {
		pins, err := m.cat.PinsList(ctx, catalog.PinsListParams{Graph: m.in.Graph, RunID: m.in.RunID})
		if err != nil {
			return fmt.Errorf("list pins: %w", err)
		}
		m.pins = newPinSet(pins)
	}
	for _, k := range keys {
		if m.pins.pinned(k) {
			m.keep(k, &m.res.Kept.Pin)
		} else {
			m.keep(k, &m.res.Kept.MergeBase)
		}
	}
	return nil
}

// findMergeBases records in m.mergeBases the keys of every merge-base candidate
// (mergeBaseCandidates) of the heads of the trees that are or may yet become branches:
// live (a ref that landed while the run decided included), in flight and unsettled. A
// tree's head is its newest listed commit; one that is gone or does not decode names no
// candidate — a merge cannot read that head either. Heads are kept commits, which
// retainPins reads in any case, so these reads only come earlier.
func (m *treeMark) findMergeBases(ctx context.Context, trees []ulid.ULID, classes map[ulid.ULID]treeClass) error {
	var keys []string
	for _, t := range trees {
		switch classes[t] {
		case treeLive, treeInFlight, treeUnsettled:
			if cs := m.trees[t]; len(cs) > 0 {
				keys = append(keys, cs[0].Key)
			}
		}
	}
	if err := m.readCommits(ctx, keys); err != nil {
		return err
	}
	heads := make([]format.Commit, 0, len(keys))
	for _, k := range keys {
		if c := m.commits[k]; c != nil && format.CommitIDKey(m.in.Graph, c.ID) == k {
			heads = append(heads, *c)
		}
	}
	m.mergeBases = map[string]bool{}
	for _, id := range mergeBaseCandidates(heads) {
		m.mergeBases[format.CommitIDKey(m.in.Graph, id)] = true
	}
	return nil
}

// unsettled reports a tree left alone.
func (m *treeMark) unsettled(t ulid.ULID, native, reason string, cs []treeCommit) {
	u := UnsettledTree{Tree: t.String(), Native: native, Reason: reason, Commits: int64(len(cs))}
	if w := m.witnesses[t.String()]; w != nil {
		u.Native, u.State, u.OpID = w.Native, string(w.State), w.OpID
	}
	m.res.Unsettled = append(m.res.Unsettled, u)
}

// nativeOf names the incarnation of a tree from its newest readable commit, or "".
func (m *treeMark) nativeOf(ctx context.Context, t ulid.ULID, cs []treeCommit) string {
	c, err := m.newestCommit(ctx, t, cs)
	if err != nil || c == nil {
		return ""
	}
	return format.NativeName(c.Branch, t)
}

// newestCommit reads the tree's newest commit that still exists (nil when none does).
func (m *treeMark) newestCommit(ctx context.Context, t ulid.ULID, cs []treeCommit) (*format.Commit, error) {
	for _, c := range cs {
		if err := m.readCommits(ctx, []string{c.Key}); err != nil {
			return nil, err
		}
		if why, bad := m.unreadable[c.Key]; bad {
			return nil, errUnreadable{fmt.Errorf("commit %s does not decode: %s", c.Key, why)}
		}
		if got := m.commits[c.Key]; got != nil {
			if got.ID.Tree != t {
				return nil, errUnreadable{fmt.Errorf("commit at %s names tree %s", c.Key, got.ID.Tree)}
			}
			return got, nil
		}
	}
	return nil, nil
}

// fence is fenceRefless for format 1: a format-1 fence, named by the branch of the
// tree's newest commit.
func (m *treeMark) fence(ctx context.Context, t ulid.ULID, cs []treeCommit) (treeClass, string, string, error) {
	return m.fenceRefless(ctx, reflessFence{
		tree: t,
		newest: func(ctx context.Context) (string, bool, error) {
			c, err := m.newestCommit(ctx, t, cs)
			if c == nil {
				return "", false, err
			}
			return c.Branch, true, err
		},
		encode: func(branch, native string) ([]byte, error) {
			return format.EncodeBranchRef(format.BranchRef{State: format.RefFence, Branch: branch, Native: native,
				Tree: t, Op: m.in.RunID, Reason: "cleanup"})
		},
		state: func(b []byte) (format.RefState, error) {
			ref, err := format.DecodeBranchRef(b)
			return ref.State, err
		},
	})
}

// reflessFence is what fencing a ref-less tree needs of its graph's format.
type reflessFence struct {
	tree ulid.ULID
	// newest names the branch of the tree's newest commit that still exists; found is
	// false when none does.
	newest func(ctx context.Context) (branch string, found bool, err error)
	// encode makes the format's fence bytes for the incarnation.
	encode func(branch, native string) ([]byte, error)
	// state decodes what the ref key holds, strictly in the graph's format.
	state func(body []byte) (format.RefState, error)
}

// fenceRefless wins the ref key of a tree that has no ref and no unsettled witness, so
// that no late put can ever publish it; only then may the tree be condemned. Losing to a
// live ref means the branch is live after all. One decision for both formats: only the
// commit read, the fence's bytes and the ref's decoding differ.
func (m *treeMark) fenceRefless(ctx context.Context, f reflessFence) (treeClass, string, string, error) {
	branch, found, err := f.newest(ctx)
	var bad errUnreadable
	switch {
	case errors.As(err, &bad):
		return treeUnsettled, "", "cannot learn the branch name: " + err.Error(), nil
	case err != nil:
		return 0, "", "", err
	case !found:
		return treeCondemnable, "", "its commits are gone", nil
	}
	native := format.NativeName(branch, f.tree)
	body, err := f.encode(branch, native)
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
	state, derr := f.state(put.Existing)
	switch {
	case derr != nil:
		return treeUnsettled, native, "the ref key holds bytes that do not decode", nil
	case state == format.RefLive:
		return treeLive, native, "a live ref landed before the fence", nil
	}
	return treeCondemnable, native, "already " + string(state), nil
}

// condemn condemns the candidate commits (or, in a dry run, plans them), restricted to
// the reviewed plan when there is one. Pinned commits are kept and their pins retained.
func (m *treeMark) condemn(ctx context.Context, candidates []catalog.Condemned) error {
	accepted, skipped, dropped, err := condemnEntries(ctx, m.cat, m.in.RunID, m.in.Mode, m.in.PlanRunID, m.pins, candidates)
	if err != nil {
		return err
	}
	m.res.NotInPlan += int64(len(dropped))
	// A commit the reviewed plan did not list stays, and so do its pins.
	m.kept = append(m.kept, dropped...)
	for _, k := range skipped {
		m.keep(k, &m.res.Kept.Pin)
	}
	for _, e := range accepted {
		m.res.Condemned.Commits++
		m.res.Condemned.Bytes += e.Size
		m.sample.add(e.Key)
	}
	return nil
}

// retainPins reads every kept commit and collects, per table, the versions it pins.
func (m *treeMark) retainPins(ctx context.Context) error {
	if m.tagsBad != "" {
		m.res.RetainAllData, m.res.RetainAllReason = true, m.tagsBad
	}
	if err := m.readCommits(ctx, m.kept); err != nil {
		return err
	}
	for _, k := range m.kept {
		if why, bad := m.unreadable[k]; bad && !m.res.RetainAllData {
			// Its pins are unknown: no version or object may go this run.
			m.res.RetainAllData, m.res.RetainAllReason = true, fmt.Sprintf("kept commit %s does not decode: %s", k, why)
		}
	}
	retained := map[string]map[string]bool{}
	for _, k := range m.kept {
		c := m.commits[k]
		if c == nil {
			continue
		}
		for table, v := range c.Pins {
			if retained[table] == nil {
				retained[table] = map[string]bool{}
			}
			retained[table][v.String()] = true
		}
	}
	for table, vs := range retained {
		ids := make([]string, 0, len(vs))
		for v := range vs {
			ids = append(ids, v)
		}
		sort.Strings(ids)
		m.res.Retained[table] = ids
	}
	return nil
}

// condemnEntries hands candidates to the ledger in chunks and returns the entries it
// condemned, the keys it refused because an operation pins them, and the candidates the
// reviewed plan (planRunID) did not list, which stay. A dry run condemns nothing: it
// checks the pins itself and returns what a condemning run would have condemned.
func condemnEntries(ctx context.Context, cat *catalog.Catalog, runID, mode, planRunID string, pins pinSet,
	candidates []catalog.Condemned) (accepted []catalog.Condemned, skipped, dropped []string, err error) {
	for start := 0; start < len(candidates); start += condemnChunk {
		chunk := candidates[start:min(start+condemnChunk, len(candidates))]
		if planRunID != "" {
			keys := make([]string, len(chunk))
			for i, e := range chunk {
				keys[i] = e.Key
			}
			inPlan, err := cat.CondemnedAmong(ctx, catalog.CondemnedAmongParams{RunID: planRunID, Keys: keys})
			if err != nil {
				return nil, nil, nil, fmt.Errorf("read reviewed plan: %w", err)
			}
			planned := make(map[string]bool, len(inPlan))
			for _, k := range inPlan {
				planned[k] = true
			}
			kept := chunk[:0:0]
			for _, e := range chunk {
				if planned[e.Key] {
					kept = append(kept, e)
				} else {
					dropped = append(dropped, e.Key)
				}
			}
			chunk = kept
		}
		if mode == CleanupModeDryRun {
			for _, e := range chunk {
				if pins.pinned(e.Key) {
					skipped = append(skipped, e.Key)
				} else {
					accepted = append(accepted, e)
				}
			}
			continue
		}
		if len(chunk) == 0 {
			continue
		}
		res, err := cat.CondemnedAdd(ctx, catalog.CondemnedAddParams{RunID: runID, Entries: chunk})
		if errors.Is(err, catalog.ErrStateConflict) {
			// The run ended (an earlier execution of this workflow finished it before an
			// operator reset it): retrying cannot help.
			return nil, nil, nil, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("cleanup run %s has ended: %v", runID, err), CleanupRunEndedError, err)
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("condemn: %w", err)
		}
		refused := make(map[string]bool, len(res.SkippedPinned))
		for _, k := range res.SkippedPinned {
			refused[k] = true
		}
		skipped = append(skipped, res.SkippedPinned...)
		for _, e := range chunk {
			if !refused[e.Key] {
				accepted = append(accepted, e)
			}
		}
		heartbeat(ctx, nil)
	}
	return accepted, skipped, dropped, nil
}

// markError names the mark step in its error, keeping a non-retryable ApplicationError
// (the run ended: CleanupRunEndedError) typed and non-retryable: Temporal reports an
// activity's error by its own type, so one wrapped by fmt.Errorf would be retried and
// reach the workflow untyped.
func markError(err error, f string, args ...any) error {
	what := fmt.Sprintf(f, args...)
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.NonRetryable() {
		return temporal.NewNonRetryableApplicationError(what+": "+err.Error(), app.Type(), err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// CleanupMarkTable is the second phase of a cleanup mark, for one table: it condemns
// the table versions that no kept commit pins and that are older than the guard window,
// then the data objects that no kept version lists and that are older than the guard
// window. Versions are condemned first, so that a version an operation pins meanwhile
// is either refused to the operation or kept here together with its objects.
func (a *Activities) CleanupMarkTable(ctx context.Context, in CleanupMarkTableInput) (CleanupMarkTableResult, error) {
	s := &countingStore{inner: a.Store}
	mark := markTable
	if in.Format == format.Version2 {
		mark = markTableV2
	}
	res, err := mark(ctx, a.Catalog, s, in)
	if err != nil {
		return CleanupMarkTableResult{}, markError(err, "mark table %q of graph %q", in.Table, in.Graph)
	}
	res.Requests = s.requests()
	return res, nil
}

func markTable(ctx context.Context, cat *catalog.Catalog, s storage.Store, in CleanupMarkTableInput) (CleanupMarkTableResult, error) {
	var res CleanupMarkTableResult
	sample := planSample{max: in.MaxPlanKeys}
	var pins pinSet
	if in.Mode == CleanupModeDryRun {
		list, err := cat.PinsList(ctx, catalog.PinsListParams{Graph: in.Graph, RunID: in.RunID})
		if err != nil {
			return res, fmt.Errorf("list pins: %w", err)
		}
		pins = newPinSet(list)
	}
	young := in.Now.Add(-in.GuardWindow)
	retained := make(map[string]bool, len(in.Retained))
	for _, v := range in.Retained {
		retained[v] = true
	}

	// Versions.
	vprefix := format.TableVersionsPrefix(in.Graph, in.Table)
	var keptVersions []string // keys whose manifests name kept objects
	var candidates []catalog.Condemned
	n := 0
	err := storage.ListAll(ctx, s, vprefix, func(o storage.ObjectInfo) error {
		if n++; n%1000 == 0 {
			heartbeat(ctx, nil)
		}
		id, ok := parseVersionKey(vprefix, o.Key)
		switch {
		case !ok:
			res.Kept.Unknown++
		case in.RetainAll:
			res.Kept.Unsettled++
			keptVersions = append(keptVersions, o.Key)
		case retained[id]:
			res.Kept.Referenced++
			keptVersions = append(keptVersions, o.Key)
		case o.LastModified.After(young):
			res.Kept.Guard++
			keptVersions = append(keptVersions, o.Key)
		default:
			candidates = append(candidates, catalog.Condemned{Key: o.Key, Kind: catalog.ObjectTableVersion, Size: o.Size})
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("list versions: %w", err)
	}
	accepted, skipped, dropped, err := condemnEntries(ctx, cat, in.RunID, in.Mode, in.PlanRunID, pins, candidates)
	if err != nil {
		return res, err
	}
	res.NotInPlan += int64(len(dropped))
	res.Kept.Pin += int64(len(skipped))
	// Pinned versions stay, and so do versions the reviewed plan did not list: their
	// objects stay with them.
	keptVersions = append(keptVersions, skipped...)
	keptVersions = append(keptVersions, dropped...)
	for _, e := range accepted {
		res.Condemned.Versions++
		res.Condemned.Bytes += e.Size
		sample.add(e.Key)
	}

	// The objects every kept version lists.
	referenced := map[string]bool{}
	retainAllObjects := in.RetainAll
	err = getEach(ctx, s, keptVersions, func(key string, obj storage.Object, err error) error {
		if err != nil {
			return nil // deleted by someone else since the listing: names nothing now
		}
		v, derr := format.DecodeTableVersion(obj.Body)
		if derr != nil || v.Table != in.Table {
			retainAllObjects = true // cannot tell which objects it names: keep them all
			return nil
		}
		for _, o := range v.Objects {
			referenced[o.ID.String()] = true
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("read kept versions: %w", err)
	}

	// Objects.
	oprefix := format.TableObjectsPrefix(in.Graph, in.Table)
	candidates = candidates[:0]
	err = storage.ListAll(ctx, s, oprefix, func(o storage.ObjectInfo) error {
		if n++; n%1000 == 0 {
			heartbeat(ctx, nil)
		}
		id, ok := parseObjectKey(oprefix, o.Key)
		switch {
		case !ok:
			res.Kept.Unknown++
		case retainAllObjects:
			res.Kept.Unsettled++
		case referenced[id]:
			res.Kept.Referenced++
		case o.LastModified.After(young):
			res.Kept.Guard++
		default:
			candidates = append(candidates, catalog.Condemned{Key: o.Key, Kind: catalog.ObjectData, Size: o.Size})
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("list objects: %w", err)
	}
	accepted, skipped, dropped, err = condemnEntries(ctx, cat, in.RunID, in.Mode, in.PlanRunID, pins, candidates)
	if err != nil {
		return res, err
	}
	res.NotInPlan += int64(len(dropped))
	res.Kept.Pin += int64(len(skipped))
	for _, e := range accepted {
		res.Condemned.Objects++
		res.Condemned.Bytes += e.Size
		sample.add(e.Key)
	}
	res.PlanKeys = sample.keys
	return res, nil
}
