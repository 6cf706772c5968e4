// Package soak runs seeded schedules of concurrent graft operations, storage faults,
// process faults and operator actions against the real stack (Temporal dev server,
// Postgres, the local store or versitygw), lets each schedule quiesce, and checks the
// graph with the oracle (internal/oracle). A violation is reported with its seed, its
// schedule and the smallest sub-schedule that still fails, so one command reproduces
// it (docs/testing.md).
package soak

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// Backend is the store a soak runs on.
type Backend string

// The backends.
const (
	LocalFS   Backend = "localfs"
	VersityGW Backend = "versitygw"
)

// OpKind is an operation a schedule starts through the client.
type OpKind string

// The operation kinds.
const (
	OpInit         OpKind = "init"
	OpWrite        OpKind = "write"
	OpCreate       OpKind = "create"
	OpMerge        OpKind = "merge"
	OpRestore      OpKind = "restore"
	OpTagCreate    OpKind = "tag_create"
	OpTagDelete    OpKind = "tag_delete"
	OpBranchDelete OpKind = "branch_delete"
	OpRepair       OpKind = "repair"
	OpAbandon      OpKind = "abandon"
	OpCleanup      OpKind = "cleanup"
)

// OpKinds lists the kinds the concurrent phase draws from (init runs first, always).
var OpKinds = []OpKind{OpWrite, OpCreate, OpMerge, OpRestore, OpTagCreate, OpTagDelete, OpBranchDelete, OpRepair, OpAbandon, OpCleanup}

// Op is one operation of a schedule.
type Op struct {
	ID   string        // o0, o1, … stable across shrinking
	At   time.Duration // start offset in the concurrent phase
	Kind OpKind
	// Branch is the branch written, created, deleted, restored, repaired or abandoned,
	// a merge's target, or the branch a tag names ("" is main's head).
	Branch string
	// Source is a create's or merge's source: "" (main's head), "branch:B", "commit:root",
	// "commit:head:B" (B's head when the op starts) or "tag:T"; a restore's target
	// ("commit:…" or "tag:T").
	Source string
	Tag    string
	Table  string
	// Cleanup's policy and mode.
	KeepNewest    int
	KeepNewerThan time.Duration
	NoGuard       bool
	Mode          string // dry_run, mark, sweep, sweep_run (sweep the plan of the last mark)
	// SameIDAs reuses the idempotency key of an earlier op (a retried request or a
	// different request under one id); "" is a fresh key.
	SameIDAs string
	// A write's shape: Files files (0 is one; past workflows.MaxInlineObjects the
	// client stages the list), appended to the head's version when Append is set.
	Files  int
	Append bool
	// DiesMidUpload: the write's client stops answering once its first object is stored,
	// as a killed client does; the write ends abandoned at its upload deadline.
	DiesMidUpload bool
	// Review, for a merge, protects its target first (one approval) and says how the
	// driver ends the wait: approve, reject, or deadline (none, with a short wait
	// timeout). A merge without one into a target another merge protected is approved.
	Review string
}

// label is the op's kind in the totals: a write's shape is told apart (write_append,
// write_staged for a list past workflows.MaxInlineObjects, write_staged_append).
func (o Op) label() string {
	if o.Kind == OpMerge && o.Review != "" {
		return "merge_protected_" + o.Review
	}
	if o.Kind != OpWrite {
		return string(o.Kind)
	}
	l := "write"
	if o.Files > workflows.MaxInlineObjects {
		l += "_staged"
	}
	if o.Append {
		l += "_append"
	}
	if o.DiesMidUpload {
		l += "_dies"
	}
	return l
}

// FaultClass groups fault kinds for the totals.
type FaultClass string

// The fault classes.
const (
	ClassStorage  FaultClass = "storage"
	ClassOperator FaultClass = "operator"
	ClassProcess  FaultClass = "process"
)

// Fault is one fault of a schedule: a storage rule added at At, an operator action on
// an op, or a process fault.
type Fault struct {
	ID    string // f0, f1, …
	At    time.Duration
	Class FaultClass
	// Kind: storage — lose_answer, fail_before_send, hold_late, hold_never, refuse_412,
	// refuse_403, refuse_503, delay, stall; operator — cancel, terminate, reset;
	// process — pg_terminate, kill_worker, kill_worker_alone.
	Kind string
	// Target (storage) is the key class: refs, tags, commits, tables, graph, any.
	Target string
	Op     faults.Op
	Skip   int
	Times  int
	// Victim (operator) is the op acted on.
	Victim string
}

// Schedule is everything one seed does.
type Schedule struct {
	Seed    uint64
	Backend Backend
	// Init is faulted too (InitFaulted); a re-run under the same id must adopt it.
	InitFaulted bool
	Ops         []Op
	Faults      []Fault
	Branches    []string
	Tags        []string
	// Setup lists branches created (unfaulted, from main, each with a table write) and
	// SetupTag a tag of main's head made before the concurrent phase, so the ops have
	// something to act on.
	Setup    []string
	SetupTag string
}

// branchPool holds names with '/'-relatives: a and a/b, c/d and c.
var branchPool = []string{"a", "a/b", "b", "c/d", "c", "a/b/c"}
var tagPool = []string{"t1", "t2", "v/1"}

// Generate derives seed's schedule on backend deterministically.
func Generate(seed uint64, backend Backend) Schedule {
	h := fnv.New64a()
	h.Write([]byte(backend))
	r := rand.New(rand.NewPCG(seed, h.Sum64()))
	s := Schedule{Seed: seed, Backend: backend}
	nb := 2 + r.IntN(3)
	perm := r.Perm(len(branchPool))
	for _, i := range perm[:nb] {
		s.Branches = append(s.Branches, branchPool[i])
	}
	// Most seeds include the '/'-relative pair a and a/b.
	for _, b := range []string{"a", "a/b"} {
		if r.IntN(4) != 0 && !slices.Contains(s.Branches, b) {
			s.Branches = append(s.Branches, b)
		}
	}
	s.Tags = tagPool[:1+r.IntN(len(tagPool))]
	s.InitFaulted = r.IntN(8) == 0
	for _, b := range s.Branches {
		if len(s.Setup) < 2 && r.IntN(3) != 0 && disjoint(b, s.Setup) {
			s.Setup = append(s.Setup, b)
		}
	}
	if r.IntN(2) == 0 {
		s.SetupTag = s.Tags[0]
	}
	branch := func() string { return s.Branches[r.IntN(len(s.Branches))] }
	anyBranch := func() string {
		if r.IntN(3) == 0 {
			return "main"
		}
		return branch()
	}
	tag := func() string { return s.Tags[r.IntN(len(s.Tags))] }
	source := func() string {
		switch r.IntN(5) {
		case 0:
			return ""
		case 1:
			return "branch:" + branch()
		case 2:
			return "commit:root"
		case 3:
			return "commit:head:" + anyBranch()
		}
		return "tag:" + tag()
	}
	for i := range 3 + r.IntN(5) {
		o := Op{ID: fmt.Sprintf("o%d", i), At: time.Duration(r.IntN(2000)) * time.Millisecond}
		// Creates, writes and cleanups are the common case; everything else appears too.
		switch x := r.IntN(20); {
		case x < 4:
			o.Kind = OpCreate
		case x < 7:
			o.Kind = OpWrite
		case x < 9:
			o.Kind = OpCleanup
		default:
			o.Kind = OpKinds[r.IntN(len(OpKinds))]
		}
		switch o.Kind {
		case OpWrite:
			o.Branch, o.Table = anyBranch(), []string{"t", "u"}[r.IntN(2)]
			o.Append = r.IntN(3) == 0
			if r.IntN(25) == 0 {
				o.Files = workflows.MaxInlineObjects + 1 + r.IntN(40) // a staged list
			}
			o.DiesMidUpload = r.IntN(8) == 0
		case OpCreate:
			o.Branch, o.Source = branch(), source()
		case OpMerge:
			o.Branch, o.Source = anyBranch(), "branch:"+branch()
			if r.IntN(3) == 0 || o.Source == "branch:"+o.Branch {
				o.Branch, o.Source = branch(), "branch:main"
			}
			if r.IntN(3) == 0 {
				o.Review = []string{"approve", "approve", "reject", "deadline"}[r.IntN(4)]
			}
		case OpRestore:
			o.Branch = anyBranch()
			o.Source = []string{"commit:root", "tag:" + tag(), "commit:head:" + anyBranch()}[r.IntN(3)]
		case OpTagCreate:
			o.Tag = tag()
			if r.IntN(2) == 0 {
				o.Branch = branch()
			}
		case OpTagDelete:
			o.Tag = tag()
		case OpBranchDelete, OpRepair:
			o.Branch = branch()
		case OpAbandon:
			// Abandon a create the schedule runs, shortly after it starts.
			o.Branch = branch()
			for _, p := range s.Ops {
				if p.Kind == OpCreate {
					o.Branch, o.At = p.Branch, p.At+time.Duration(r.IntN(400))*time.Millisecond
				}
			}
		case OpCleanup:
			switch r.IntN(3) {
			case 0:
				o.KeepNewest = 1 + r.IntN(2)
			case 1:
				o.KeepNewerThan = time.Duration(1+r.IntN(3)) * time.Second
			default:
				o.KeepNewest, o.KeepNewerThan = 1, time.Second
			}
			o.NoGuard = r.IntN(4) != 0
			o.Mode = []string{"dry_run", "mark", "sweep", "sweep", "sweep_run"}[r.IntN(5)]
		}
		if i > 0 && r.IntN(12) == 0 {
			prev := s.Ops[r.IntN(i)]
			if prev.Kind == o.Kind && o.Kind != OpAbandon {
				o.SameIDAs = prev.ID
			}
		}
		if o.Kind == OpCleanup && r.IntN(6) == 0 && i > 0 {
			// A dry run and a real cleanup under one run id.
			for _, p := range s.Ops {
				if p.Kind == OpCleanup {
					o.SameIDAs = p.ID
					break
				}
			}
		}
		s.Ops = append(s.Ops, o)
	}
	for i := range r.IntN(4) {
		f := Fault{ID: fmt.Sprintf("f%d", i), At: time.Duration(r.IntN(1500)) * time.Millisecond, Class: ClassStorage}
		f.Kind = []string{"lose_answer", "lose_answer", "fail_before_send", "hold_late", "hold_never", "refuse_412", "refuse_403", "refuse_503", "delay", "stall"}[r.IntN(10)]
		f.Target = []string{"refs", "refs", "tags", "commits", "commits", "tables", "graph", "any"}[r.IntN(8)]
		f.Op = faults.OpPut // held puts
		if !strings.HasPrefix(f.Kind, "hold") {
			f.Op = []faults.Op{faults.OpPut, faults.OpPut, faults.OpPut, faults.OpGet, faults.OpList, faults.OpDeleteBatch, ""}[r.IntN(7)]
		}
		f.Skip, f.Times = r.IntN(3), 1+r.IntN(2)
		s.Faults = append(s.Faults, f)
	}
	// Operator actions on a fraction of seeds.
	if r.IntN(3) == 0 {
		victim := s.Ops[r.IntN(len(s.Ops))]
		f := Fault{ID: fmt.Sprintf("f%d", len(s.Faults)), Class: ClassOperator,
			At:   victim.At + time.Duration(r.IntN(800))*time.Millisecond,
			Kind: []string{"cancel", "terminate", "reset"}[r.IntN(3)], Victim: victim.ID}
		s.Faults = append(s.Faults, f)
	}
	// Process faults on a smaller fraction.
	if r.IntN(8) == 0 {
		f := Fault{ID: fmt.Sprintf("f%d", len(s.Faults)), Class: ClassProcess, At: time.Duration(r.IntN(1500)) * time.Millisecond}
		f.Kind = []string{"pg_terminate", "pg_terminate", "kill_worker", "kill_worker_alone"}[r.IntN(4)]
		s.Faults = append(s.Faults, f)
	}
	return s
}

// disjoint reports whether b is no '/'-relative of any of names (live branch names are
// prefix-disjoint).
func disjoint(b string, names []string) bool {
	return !slices.ContainsFunc(names, func(n string) bool {
		return n == b || strings.HasPrefix(n, b+"/") || strings.HasPrefix(b, n+"/")
	})
}

// Keep returns the schedule with only the ops and faults whose ids are in keep (nil
// keeps everything). Operator faults whose victim was dropped are dropped too.
func (s Schedule) Keep(keep map[string]bool) Schedule {
	if keep == nil {
		return s
	}
	out := s
	out.Ops, out.Faults = nil, nil
	for _, o := range s.Ops {
		if keep[o.ID] {
			out.Ops = append(out.Ops, o)
		}
	}
	for _, f := range s.Faults {
		if keep[f.ID] && (f.Victim == "" || keep[f.Victim]) {
			out.Faults = append(out.Faults, f)
		}
	}
	return out
}

// IDs lists the ids of the schedule's ops and faults.
func (s Schedule) IDs() []string {
	var ids []string
	for _, o := range s.Ops {
		ids = append(ids, o.ID)
	}
	for _, f := range s.Faults {
		ids = append(ids, f.ID)
	}
	return ids
}

// String prints the schedule one item a line.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d on %s: branches %v, tags %v, init faulted %v, set up %v and tag %q\n", s.Seed, s.Backend, s.Branches, s.Tags, s.InitFaulted, s.Setup, s.SetupTag)
	for _, o := range s.Ops {
		fmt.Fprintf(&b, "  %s +%v %s", o.ID, o.At, o.Kind)
		for _, kv := range [][2]string{{"branch", o.Branch}, {"source", o.Source}, {"tag", o.Tag}, {"table", o.Table}, {"mode", o.Mode}, {"same-id-as", o.SameIDAs}, {"review", o.Review}} {
			if kv[1] != "" {
				fmt.Fprintf(&b, " %s=%s", kv[0], kv[1])
			}
		}
		if o.Kind == OpWrite {
			fmt.Fprintf(&b, " files=%d append=%v dies-mid-upload=%v", max(o.Files, 1), o.Append, o.DiesMidUpload)
		}
		if o.Kind == OpCleanup {
			fmt.Fprintf(&b, " keep-newest=%d keep-newer-than=%v no-guard=%v", o.KeepNewest, o.KeepNewerThan, o.NoGuard)
		}
		b.WriteByte('\n')
	}
	for _, f := range s.Faults {
		fmt.Fprintf(&b, "  %s +%v %s/%s", f.ID, f.At, f.Class, f.Kind)
		if f.Class == ClassStorage {
			fmt.Fprintf(&b, " target=%s op=%q skip=%d times=%d", f.Target, f.Op, f.Skip, f.Times)
		}
		if f.Victim != "" {
			fmt.Fprintf(&b, " victim=%s", f.Victim)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
