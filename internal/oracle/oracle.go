// Package oracle checks that a graph and its ledger are in a state graft promises: after
// any sequence of operations, faults and cleanups, whatever ended each operation. The
// real-stack tests run it after every test, the soak after every schedule, the
// production tier after its runs.
//
// Storage: every live ref names a tree with a head; at most one live incarnation per
// logical name; every commit reachable from a live head or a live tag has the table
// versions it pins, and their data objects read back with their size and checksum;
// nothing an in-flight operation pins is missing; every commit a done write reported is
// on its branch, reachable from the head by first parents; no commit key's bytes ever
// change (checked across checks that share Config.CommitDigests); an external entry of a
// version must still be the object it was imported as.
//
// Ledger: no pins held by ended operations; no witness unsettled (intent, cloned,
// in_doubt) whose operation ended; no unfinished operation whose workflow is closed
// (checked when a WorkflowStatus is given, after the reconciler ran); every name used can
// be created again — free, or live through exactly the incarnation storage and the ledger
// agree on.
package oracle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// WorkflowStatus tells whether a workflow has closed (activities.WorkflowStatus; the
// worker's worker.TemporalWorkflows implements it).
type WorkflowStatus interface {
	WorkflowClosed(ctx context.Context, workflowID string) (bool, error)
}

// ReportedCommit is a commit a write reported done on a branch.
type ReportedCommit struct {
	Branch string
	Commit string
}

// Config says what to check.
type Config struct {
	// Store holds the graph; read directly, never through fault injection. Required,
	// with the ledger (Catalog) and the graph's name.
	Store   storage.Store
	Catalog *catalog.Catalog
	Graph   string
	// Workflows, when set, checks that no unfinished operation's workflow is closed.
	Workflows WorkflowStatus
	Reported  []ReportedCommit // commits writes reported done; each must be on its branch
	// Names lists logical branch names the caller used; each must be free or live
	// (as every name the ledger knows must anyway).
	Names []string
	// CommitDigests, when set, keeps the SHA-256 of every commit key's bytes read across
	// the checks sharing it (nil: within one check): a commit id names one byte string.
	CommitDigests map[string]string
	// Quiesced runs the soak's checks (soak.go): every operation, of OpIDs (the ids
	// the caller used) or of the graph, has ended; and every Immutable key (of a commit,
	// table version or data object an operation reported) still holds the bytes whose
	// sha256 it maps to, or is gone when Reclaimed (a sweeping cleanup ran).
	Quiesced  bool
	OpIDs     []string
	Immutable map[string][32]byte
	Reclaimed bool
}

// Violation is one broken promise.
type Violation struct {
	// Rule names the promise, e.g. "live-ref-tree", "pins-of-ended-operation".
	Rule   string
	Detail string
}

func (v Violation) String() string { return v.Rule + ": " + v.Detail }

// Error joins violations into one error, nil when there are none.
func Error(vs []Violation) error {
	if len(vs) == 0 {
		return nil
	}
	lines := make([]string, len(vs))
	for i, v := range vs {
		lines[i] = v.String()
	}
	return fmt.Errorf("oracle: %d violation(s):\n  %s", len(vs), strings.Join(lines, "\n  "))
}

// Check runs every check and returns the violations found. An error means a check could
// not be run (storage or the ledger did not answer).
func Check(ctx context.Context, cfg Config) ([]Violation, error) {
	g, err := graph.Open(cfg.Store, cfg.Graph)
	if err != nil {
		return nil, err
	}
	if cfg.CommitDigests == nil {
		cfg.CommitDigests = map[string]string{}
	}
	c := &checker{cfg: cfg, ctx: ctx, g: g, missing: map[format.CommitID]bool{}, objects: map[string]bool{}}
	for _, step := range []func() error{c.refsAndCommits, c.tags, c.reported, c.ledger, c.quiesced} {
		if err := step(); err != nil {
			return c.out, err
		}
	}
	return c.out, nil
}

type checker struct {
	cfg Config
	ctx context.Context
	g   *graph.Graph
	out []Violation
	// missing holds every commit walk visited, true when it found it absent, so a root
	// visited after it reached them as an ancestor is still reported.
	missing map[format.CommitID]bool
	objects map[string]bool
	// live maps logical → natives with a live ref in storage.
	live map[string][]string
	// unfinished is the graph's unfinished operations, as the ledger check read them.
	unfinished []catalog.Operation
}

func (c *checker) add(rule, f string, args ...any) {
	c.out = append(c.out, Violation{Rule: rule, Detail: fmt.Sprintf(f, args...)})
}

func (c *checker) refsAndCommits() error {
	c.live = map[string][]string{}
	g := c.cfg.Graph
	err := c.eachObject(format.BranchRefsPrefix(g), func(key string, body []byte) error {
		ref, err := format.DecodeBranchRef(body)
		if err != nil {
			c.add("ref-readable", "%s: %v", key, err)
			return nil
		}
		if ref.State != format.RefLive {
			return nil
		}
		c.live[ref.Branch] = append(c.live[ref.Branch], ref.Native)
		return c.walk("live ref "+ref.Native, ref.Head, true)
	})
	if err != nil {
		return fmt.Errorf("list refs: %w", err)
	}
	for logical, natives := range c.live {
		if len(natives) > 1 {
			slices.Sort(natives)
			c.add("one-live-incarnation", "branch %s has %d live refs: %v", logical, len(natives), natives)
		}
	}
	return nil
}

func (c *checker) tags() error {
	return c.eachObject(format.TagsPrefix(c.cfg.Graph), func(key string, body []byte) error {
		tag, err := format.DecodeTag(body)
		if err != nil {
			c.add("tag-readable", "%s: %v", key, err)
			return nil
		}
		if tag.State == format.TagLive {
			return c.walk("tag "+tag.Name, tag.Commit, true)
		}
		return nil
	})
}

// eachObject calls fn with the key and bytes of every object under prefix that
// is still there when read.
func (c *checker) eachObject(prefix string, fn func(key string, body []byte) error) error {
	return storage.ListAll(c.ctx, c.cfg.Store, prefix, func(o storage.ObjectInfo) error {
		obj, err := c.cfg.Store.Get(c.ctx, o.Key)
		if errors.Is(err, storage.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return fn(o.Key, obj.Body)
	})
}

// walk checks a commit reachable from a root and everything it pins, then its parents. A
// parent that is missing is an ancestor cleanup reclaimed: nothing needs it.
func (c *checker) walk(from string, id format.CommitID, root bool) error {
	missing, seen := c.missing[id]
	var cm graph.Commit
	var err error
	if !seen {
		cm, err = c.commit(id)
		missing = errors.Is(err, graph.ErrCommitNotFound)
		c.missing[id] = missing
	}
	if root && missing {
		c.add("root-commit", "%s names commit %s, which does not exist", from, id)
	}
	if seen || missing {
		return nil
	}
	if err != nil {
		c.add("commit-readable", "commit %s (from %s): %v", id, from, err)
		return nil
	}
	if err := c.g.EachPin(c.ctx, cm, func(p format.PinEntry) error {
		return c.version(from, id, p.Table, p.Version.String())
	}); err != nil {
		if isStorageErr(err) {
			return err
		}
		c.add("commit-pins", "commit %s (from %s): its pins cannot be read: %v", id, from, err)
	}
	for _, p := range cm.Parents {
		if err := c.walk(from, p, false); err != nil {
			return err
		}
	}
	return nil
}

func (c *checker) version(from string, commit format.CommitID, table, version string) error {
	key := table + "/" + version
	if c.objects[key] {
		return nil
	}
	c.objects[key] = true
	v, err := format.ParseULID(version)
	if err != nil {
		c.add("version-id", "commit %s pins %s of %s: %v", commit, version, table, err)
		return nil
	}
	tv, err := c.g.Version(c.ctx, table, v)
	if err != nil {
		c.add("pinned-version", "commit %s (reachable from %s) pins version %s of %s: %v", commit, from, version, table, err)
		return nil
	}
	err = c.g.EachEntry(c.ctx, tv, func(o format.ManifestEntry) error {
		okey := graph.ObjectKeyOf(c.cfg.Graph, table, o)
		if o.IsExternal() {
			if err := graph.CheckExternal(c.ctx, c.cfg.Store, o); errors.Is(err, graph.ErrExternalChanged) || errors.Is(err, storage.ErrNotFound) {
				c.add("external-object", "version %s of %s (from %s) imports %s: %v", version, table, from, okey, err)
			} else if err != nil {
				return fmt.Errorf("head %s: %w", okey, err)
			}
			return nil
		}
		obj, err := c.cfg.Store.Get(c.ctx, okey)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			c.add("data-object", "version %s of %s (from %s) lists %s, which is missing", version, table, from, okey)
			return nil
		case err != nil:
			return fmt.Errorf("read %s: %w", okey, err)
		}
		sum := sha256.Sum256(obj.Body)
		if int64(len(obj.Body)) != o.Size || hex.EncodeToString(sum[:]) != o.SHA256 {
			c.add("data-object", "%s reads back %d bytes with sha256 %x; its version lists %d bytes, %s", okey, len(obj.Body), sum, o.Size, o.SHA256)
		}
		return nil
	})
	if err != nil && !isStorageErr(err) {
		c.add("pinned-version", "version %s of %s (from %s): its entries cannot be read: %v", version, table, from, err)
		return nil
	}
	return err
}

// isStorageErr reports an error of the store (not of what it holds): the check cannot go on.
func isStorageErr(err error) bool {
	return errors.Is(err, storage.ErrUnavailable) || errors.Is(err, storage.ErrAmbiguous) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded)
}

// commit reads a commit, checking its key's bytes against CommitDigests.
func (c *checker) commit(id format.CommitID) (graph.Commit, error) {
	key := format.CommitIDKey(c.cfg.Graph, id)
	obj, err := c.cfg.Store.Get(c.ctx, key)
	if err == nil {
		sum := sha256.Sum256(obj.Body)
		d := hex.EncodeToString(sum[:])
		if was, ok := c.cfg.CommitDigests[key]; ok && was != d {
			c.add("commit-bytes-stable", "%s held bytes with sha256 %s, now %s: a commit key was refilled", key, was, d)
		}
		c.cfg.CommitDigests[key] = d
	}
	return graph.ReadCommit(c.ctx, c.cfg.Store, c.cfg.Graph, id.String())
}

// reported checks that every commit a done write reported is on its branch: in the
// tree of the branch's live incarnation, at or below its head, and reached from the head
// by first parents (a gap cleanup left below it is fine).
func (c *checker) reported() error {
	for _, rc := range c.cfg.Reported {
		id, err := format.ParseCommitID(rc.Commit)
		if err != nil {
			c.add("reported-commit", "%s reported on %s: %v", rc.Commit, rc.Branch, err)
			continue
		}
		b, err := graph.ResolveBranch(c.ctx, c.cfg.Store, c.cfg.Graph, rc.Branch)
		if err != nil {
			c.add("reported-commit", "commit %s reported done on %s: the branch does not resolve: %v", id, rc.Branch, err)
			continue
		}
		if b.Tree != id.Tree {
			c.add("reported-commit", "commit %s reported done on %s is not in its live tree %s", id, rc.Branch, b.Tree)
			continue
		}
		h, err := c.g.HeadOf(c.ctx, b)
		switch {
		case isStorageErr(err):
			return fmt.Errorf("read head of %s: %w", rc.Branch, err)
		case err != nil: // the store answered: the live ref names a head it does not hold
			c.add("reported-commit", "commit %s reported done on %s: its head cannot be read: %v", id, rc.Branch, err)
			continue
		}
		head := h.Commit
		if head.ID.Seq < id.Seq {
			c.add("reported-commit", "commit %s reported done on %s is above its head %s", id, rc.Branch, head.ID)
			continue
		}
		if _, err := c.commit(id); err != nil {
			c.add("reported-commit", "commit %s reported done on %s: %v", id, rc.Branch, err)
			continue
		}
		for cur := head; cur.ID != id; {
			if len(cur.Parents) == 0 || cur.Parents[0].Tree != id.Tree || cur.Parents[0].Seq < id.Seq {
				c.add("reported-commit", "commit %s reported done on %s is not reached from its head %s by first parents", id, rc.Branch, head.ID)
				break
			}
			next, err := c.commit(cur.Parents[0])
			if errors.Is(err, graph.ErrCommitNotFound) {
				break // a gap cleanup left; the commit itself exists below it
			}
			if err != nil {
				return err
			}
			cur = next
		}
	}
	return nil
}

func (c *checker) ledger() error {
	cat, g := c.cfg.Catalog, c.cfg.Graph
	ops := map[string]catalog.Operation{}
	op := func(id string) (catalog.Operation, error) {
		if o, ok := ops[id]; ok {
			return o, nil
		}
		o, err := cat.OperationGet(c.ctx, catalog.OperationGetParams{ID: id})
		if err == nil {
			ops[id] = o
		}
		return o, err
	}
	pins, err := cat.PinsList(c.ctx, catalog.PinsListParams{Graph: g})
	if err != nil {
		return err
	}
	for _, p := range pins {
		if p.LatePut {
			// A late put's pin outlives its operation until an operator releases it
			// (catalog.PinsHoldForLatePut); its key exists only if the put landed.
			continue
		}
		o, err := op(p.OpID)
		if err != nil {
			return err
		}
		if o.State == catalog.OperationDone {
			c.add("pins-of-ended-operation", "operation %s (%s, %s) is done but holds a pin on %s", o.ID, o.Kind, o.Outcome, p.Key)
			continue
		}
		if p.Kind == catalog.ObjectCommit || p.Kind == catalog.ObjectTableVersion || p.Kind == catalog.ObjectData {
			if _, err := c.cfg.Store.Head(c.ctx, p.Key); errors.Is(err, storage.ErrNotFound) {
				c.add("pinned-key", "operation %s (%s, %s) pins %s, which is missing", o.ID, o.Kind, o.State, p.Key)
			} else if err != nil {
				return err
			}
		}
	}
	incs, err := cat.IncarnationListByGraph(c.ctx, catalog.IncarnationListByGraphParams{Graph: g})
	if err != nil {
		return err
	}
	open := map[string][]catalog.Incarnation{}
	for _, inc := range incs {
		if inc.State == catalog.IncarnationRetired || inc.State == catalog.IncarnationUnpublished {
			continue
		}
		open[inc.Logical] = append(open[inc.Logical], inc)
		if inc.State == catalog.IncarnationLive {
			continue
		}
		o, err := op(inc.OpID)
		if err != nil {
			return err
		}
		if o.State == catalog.OperationDone {
			c.add("witness-of-ended-operation", "witness %s is %s but its operation %s ended %s", inc.Native, inc.State, o.ID, o.Outcome)
		}
	}
	// Every name used can be created again (see the package doc).
	names := append(slices.Collect(maps.Keys(open)), c.cfg.Names...)
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		var ledgerLive []string
		blocked := ""
		for _, inc := range open[name] {
			if inc.State == catalog.IncarnationLive {
				ledgerLive = append(ledgerLive, inc.Native)
			} else if o, err := op(inc.OpID); err == nil && o.State == catalog.OperationDone {
				blocked = inc.Native + " (" + string(inc.State) + ")"
			}
		}
		if len(ledgerLive) > 1 {
			c.add("one-live-incarnation", "the ledger has %d live incarnations of %s: %v", len(ledgerLive), name, ledgerLive)
		}
		storeLive := c.live[name]
		switch {
		case blocked != "":
			c.add("name-reusable", "%s is held by the unsettled witness %s of an ended operation", name, blocked)
		case len(ledgerLive) == 1 && (len(storeLive) != 1 || storeLive[0] != ledgerLive[0]):
			c.add("name-reusable", "the ledger says %s is live through %s, storage through %v", name, ledgerLive[0], storeLive)
		}
	}
	c.unfinished, err = cat.OperationListUnfinished(c.ctx, catalog.OperationListUnfinishedParams{Graph: g, Limit: 1000})
	if err != nil {
		return err
	}
	for _, o := range c.unfinished {
		if c.cfg.Workflows == nil || o.WorkflowID == "" {
			continue
		}
		closed, err := c.cfg.Workflows.WorkflowClosed(c.ctx, o.WorkflowID)
		if err != nil {
			return err
		}
		if closed {
			c.add("unfinished-operation-closed-workflow", "operation %s (%s) is %s but its workflow %s is closed", o.ID, o.Kind, o.State, o.WorkflowID)
		}
	}
	return nil
}
