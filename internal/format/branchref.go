package format

import "github.com/oklog/ulid/v2"

// RefState is the state a branch ref records.
type RefState string

// The states of a branch ref: only live makes its incarnation live; retired
// and fence refs keep any later put from landing at the key.
const (
	RefLive    RefState = "live"
	RefRetired RefState = "retired" // replaced a live ref by compare-and-swap
	RefFence   RefState = "fence"   // won the key so the incarnation never goes live
)

// BranchRef is the object at BranchRefKey(graph, Native).
type BranchRef struct {
	State  RefState
	Branch string    // logical name; may be empty only for a fence
	Native string    // "{Branch}.{Tree}"
	Tree   ulid.ULID // the incarnation's tree; may be zero only for a fence
	Op     string    // the operation that wrote this ref
	// RetiredOp is the operation that retired the branch; set iff State is RefRetired.
	RetiredOp string
	// Reason says why a fence was written; set iff State is RefFence.
	Reason string
	// Head is the head a live or retired ref names (its tree's); zero in a fence.
	Head CommitID
}

type branchRefWire struct {
	Format    int      `json:"format"`
	Kind      Kind     `json:"kind"`
	State     RefState `json:"state"`
	Branch    string   `json:"branch,omitempty"`
	Native    string   `json:"native"`
	Tree      string   `json:"tree,omitempty"`
	Head      string   `json:"head,omitempty"`
	Op        string   `json:"op"`
	RetiredOp string   `json:"retired_op,omitempty"`
	Reason    string   `json:"reason,omitempty"`
}

var branchRefFields = fieldSet{
	required: []string{"format", "kind", "state", "native", "op"},
	optional: []string{"branch", "tree", "head", "retired_op", "reason"},
}

// Validate reports the first invalid field of r.
func (r BranchRef) Validate() error {
	const k = KindBranchRef
	switch r.State {
	case RefLive, RefRetired, RefFence:
	default:
		return malformed(k, "state", "not live, retired or fence")
	}
	logical, tree, err := ParseNative(r.Native)
	if err != nil {
		return malformedErr(k, "native", err)
	}
	hasInfo := r.Branch != "" || !r.Tree.IsZero()
	if r.State != RefFence || hasInfo {
		if r.Branch != logical {
			return malformed(k, "branch", "does not match native name "+r.Native)
		}
		if r.Tree != tree {
			return malformed(k, "tree", "does not match native name "+r.Native)
		}
	}
	switch {
	case r.State == RefFence && !r.Head.IsZero():
		return malformed(k, "head", "set on a fence")
	case r.State != RefFence && r.Head.IsZero():
		return malformed(k, "head", "required on a "+string(r.State)+" ref")
	case r.State != RefFence && (r.Head.Tree != r.Tree || !r.Head.valid()):
		return malformed(k, "head", "not a commit of the ref's tree")
	}
	setOn := string(r.State) + " ref"
	return firstBad(k, fieldCheck{"op", checkOp(r.Op), nil},
		fieldCheck{"retired_op", onlyIf(r.State == RefRetired, r.RetiredOp, checkOp, setOn), nil},
		fieldCheck{"reason", onlyIf(r.State == RefFence, r.Reason, checkReason, setOn), nil})
}

// EncodeBranchRef returns the canonical bytes of r.
func EncodeBranchRef(r BranchRef) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	w := branchRefWire{Format: Version, Kind: KindBranchRef, State: r.State, Branch: r.Branch, Native: r.Native,
		Op: r.Op, RetiredOp: r.RetiredOp, Reason: r.Reason}
	if !r.Tree.IsZero() {
		w.Tree = r.Tree.String()
	}
	if !r.Head.IsZero() {
		w.Head = r.Head.String()
	}
	return encodeWire(KindBranchRef, w)
}

// DecodeBranchRef strictly decodes a branch ref.
func DecodeBranchRef(b []byte) (BranchRef, error) {
	const k = KindBranchRef
	w, err := decodeWire[branchRefWire](b, k, branchRefFields)
	if err != nil {
		return BranchRef{}, err
	}
	r := BranchRef{State: w.State, Branch: w.Branch, Native: w.Native, Op: w.Op, RetiredOp: w.RetiredOp, Reason: w.Reason}
	if w.Tree != "" {
		if r.Tree, err = ParseULID(w.Tree); err != nil {
			return BranchRef{}, malformedErr(k, "tree", err)
		}
	}
	if w.Head != "" {
		if r.Head, err = ParseCommitID(w.Head); err != nil {
			return BranchRef{}, malformedErr(k, "head", err)
		}
	}
	if err := r.Validate(); err != nil {
		return BranchRef{}, err
	}
	return r, nil
}
