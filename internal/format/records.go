package format

import (
	"time"

	"github.com/oklog/ulid/v2"
)

// Graph is the graph record at GraphKey, written last by init: its presence means the rest exists.
type Graph struct {
	Name          string
	CreatedAt     time.Time
	Op            string // the operation that created the graph
	DefaultBranch string // logical name of the default branch, "main"
}

type graphWire struct {
	Format        int    `json:"format"`
	Kind          Kind   `json:"kind"`
	Name          string `json:"name"`
	CreatedAt     string `json:"created_at"`
	Op            string `json:"op"`
	DefaultBranch string `json:"default_branch"`
}

// Validate reports the first invalid field of g.
func (g Graph) Validate() error {
	return firstBad(KindGraph, fieldCheck{"name", "", ValidateGraphName(g.Name)}, fieldCheck{"created_at", checkTime(g.CreatedAt), nil},
		fieldCheck{"op", checkOp(g.Op), nil}, fieldCheck{"default_branch", "", ValidateBranchName(g.DefaultBranch)})
}

// EncodeGraph returns the canonical bytes of g.
func EncodeGraph(g Graph) ([]byte, error) {
	return encodeWire(KindGraph, g.Validate(), graphWire{Format: Version, Kind: KindGraph, Name: g.Name,
		CreatedAt: FormatTime(g.CreatedAt), Op: g.Op, DefaultBranch: g.DefaultBranch})
}

// DecodeGraph strictly decodes a graph record.
func DecodeGraph(b []byte) (Graph, error) {
	w, err := decodeWire[graphWire](b, KindGraph)
	if err != nil {
		return Graph{}, err
	}
	p := fieldParser{k: KindGraph}
	g := Graph{Name: w.Name, CreatedAt: p.time("created_at", w.CreatedAt), Op: w.Op, DefaultBranch: w.DefaultBranch}
	return validated(g, p.err)
}

// TagState is the state a tag records.
type TagState string

// The states of a tag; a retired tag keeps the key so no late put re-points it.
const (
	TagLive    TagState = "live"
	TagRetired TagState = "retired"
)

// Tag is the object at TagKey: an immutable, graph-wide name for a commit.
type Tag struct {
	State     TagState
	Name      string
	Commit    CommitID
	Op        string // the operation that created the tag
	CreatedAt time.Time
	RetiredOp string // the operation that retired the tag; set iff State is TagRetired
}

type tagWire struct {
	Format    int      `json:"format"`
	Kind      Kind     `json:"kind"`
	State     TagState `json:"state"`
	Name      string   `json:"name"`
	Commit    string   `json:"commit"`
	Op        string   `json:"op"`
	CreatedAt string   `json:"created_at"`
	RetiredOp string   `json:"retired_op,omitempty"`
}

// Validate reports the first invalid field of t.
func (t Tag) Validate() error {
	const k = KindTag
	if t.State != TagLive && t.State != TagRetired {
		return malformed(k, "state", "not live or retired")
	}
	return firstBad(k, fieldCheck{"name", "", ValidateTagName(t.Name)},
		fieldCheck{"commit", whyIf(!t.Commit.valid(), "not a commit id"), nil},

		fieldCheck{"op", checkOp(t.Op), nil}, fieldCheck{"created_at", checkTime(t.CreatedAt), nil},
		fieldCheck{"retired_op", onlyIf(t.State == TagRetired, t.RetiredOp, checkOp, "live tag"), nil})
}

// EncodeTag returns the canonical bytes of t.
func EncodeTag(t Tag) ([]byte, error) {
	w := tagWire{Format: Version, Kind: KindTag, State: t.State, Name: t.Name, Commit: t.Commit.String(),
		Op: t.Op, CreatedAt: FormatTime(t.CreatedAt), RetiredOp: t.RetiredOp}
	return encodeWire(KindTag, t.Validate(), w)
}

// DecodeTag strictly decodes a tag.
func DecodeTag(b []byte) (Tag, error) {
	w, err := decodeWire[tagWire](b, KindTag)
	if err != nil {
		return Tag{}, err
	}
	p := fieldParser{k: KindTag}
	t := Tag{State: w.State, Name: w.Name, Commit: p.commitID("commit", w.Commit, false), Op: w.Op,
		CreatedAt: p.time("created_at", w.CreatedAt), RetiredOp: w.RetiredOp}
	return validated(t, p.err)
}

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
	State     RefState
	Branch    string    // logical name; may be empty only for a fence
	Native    string    // "{Branch}.{Tree}"
	Tree      ulid.ULID // the incarnation's tree; may be zero only for a fence
	Op        string    // the operation that wrote this ref
	RetiredOp string    // the operation that retired the branch; set iff State is RefRetired
	Reason    string    // why a fence was written; set iff State is RefFence
	Head      CommitID  // the head a live or retired ref names (its tree's); zero in a fence
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
	bare := r.State == RefFence && r.Branch == "" && r.Tree.IsZero() // a fence may name neither
	switch {
	case !bare && r.Branch != logical:
		return malformed(k, "branch", "does not match native name "+r.Native)
	case !bare && r.Tree != tree:
		return malformed(k, "tree", "does not match native name "+r.Native)
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
	w := branchRefWire{Format: Version, Kind: KindBranchRef, State: r.State, Branch: r.Branch, Native: r.Native,
		Head: optionalID(r.Head), Op: r.Op, RetiredOp: r.RetiredOp, Reason: r.Reason}
	if !r.Tree.IsZero() {
		w.Tree = r.Tree.String()
	}
	return encodeWire(KindBranchRef, r.Validate(), w)
}

// DecodeBranchRef strictly decodes a branch ref.
func DecodeBranchRef(b []byte) (BranchRef, error) {
	w, err := decodeWire[branchRefWire](b, KindBranchRef)
	if err != nil {
		return BranchRef{}, err
	}
	p := fieldParser{k: KindBranchRef}
	r := BranchRef{State: w.State, Branch: w.Branch, Native: w.Native, Tree: p.ulid("tree", w.Tree, true),
		Op: w.Op, RetiredOp: w.RetiredOp, Reason: w.Reason, Head: p.commitID("head", w.Head, true)}
	return validated(r, p.err)
}

// TableVersion is a table version at TableVersionKey: its entries by name, and their objects' total size.
type TableVersion struct {
	Table     string
	ID        ulid.ULID
	Entries   MapRef[ManifestEntry]
	Bytes     int64
	CreatedAt time.Time
	Op        string
	// Base, when set, is the version this one was written on, and Added, Removed and
	// Replaced the entries that differ from it: what a merge adopting this version over
	// Base reports, without reading Base. Base may have been reclaimed since.
	Base                     ulid.ULID
	Added, Removed, Replaced int64
}

// Len returns the number of entries.
func (v TableVersion) Len() int64 { return v.Entries.Len() }

type tableVersionWire struct {
	Format    int        `json:"format"`
	Kind      Kind       `json:"kind"`
	Table     string     `json:"table"`
	ID        string     `json:"id"`
	Entries   mapRefJSON `json:"entries"`
	Bytes     int64      `json:"bytes"`
	CreatedAt string     `json:"created_at"`
	Op        string     `json:"op"`
	// Base and the counts are all present or all absent.
	Base     string `json:"base,omitempty"`
	Added    *int64 `json:"added,omitempty"`
	Removed  *int64 `json:"removed,omitempty"`
	Replaced *int64 `json:"replaced,omitempty"`
}

// Validate reports the first invalid field of v.
func (v TableVersion) Validate() error {
	const k = KindTableVersion
	if err := ValidateTableName(v.Table); err != nil {
		return malformedErr(k, "table", err)
	}
	if v.ID.IsZero() {
		return malformed(k, "id", "zero ULID")
	}
	if _, err := ManifestMap.refWire(k, "entries", v.Entries); err != nil {
		return err
	}
	var sum int64
	for _, e := range v.Entries.Entries {
		sum += e.Size
	}
	switch {
	case v.Bytes < 0:
		return malformed(k, "bytes", "negative")
	case v.Entries.IsInline() && sum != v.Bytes:
		return malformed(k, "bytes", "not the total size of the entries")
	}
	if field, why := checkChange(v.ID, v.Base, v.Added, v.Removed, v.Replaced); why != "" {
		return malformed(k, field, why)
	}
	return firstBad(k, fieldCheck{"created_at", checkTime(v.CreatedAt), nil}, fieldCheck{"op", checkOp(v.Op), nil})
}

// EncodeTableVersion returns the canonical bytes of v.
func EncodeTableVersion(v TableVersion) ([]byte, error) {
	const k = KindTableVersion
	entries, _ := ManifestMap.refWire(k, "entries", v.Entries)
	w := tableVersionWire{Format: Version, Kind: k, Table: v.Table,
		ID: v.ID.String(), Entries: entries, Bytes: v.Bytes, CreatedAt: FormatTime(v.CreatedAt), Op: v.Op}
	if !v.Base.IsZero() {
		w.Base, w.Added, w.Removed, w.Replaced = v.Base.String(), &v.Added, &v.Removed, &v.Replaced
	}
	return encodeWire(k, v.Validate(), w)
}

// DecodeTableVersion strictly decodes a table version.
func DecodeTableVersion(b []byte) (TableVersion, error) {
	const k = KindTableVersion
	top, err := decodeEnvelope(b, k, fieldsOf[tableVersionWire]())
	if err != nil {
		return TableVersion{}, err
	}
	if raw := top["entries"]; len(raw) == 0 || raw[0] != '{' {
		return TableVersion{}, malformed(k, "entries", "not an object")
	}
	var w tableVersionWire // entries are decoded from top
	if err := unmarshalWire(k, b, &w); err != nil {
		return TableVersion{}, err
	}
	p := fieldParser{k: k}
	v := TableVersion{Table: w.Table, ID: p.ulid("id", w.ID, false), Bytes: w.Bytes, Op: w.Op}
	if p.err != nil {
		return TableVersion{}, p.err
	}
	if v.Entries, err = ManifestMap.decodeRef(k, "entries", top["entries"]); err != nil {
		return TableVersion{}, err
	}
	v.CreatedAt = p.time("created_at", w.CreatedAt)
	if field, why := changePresent(w.Base, w.Added, w.Removed, w.Replaced); why != "" {
		return TableVersion{}, malformed(k, field, why)
	}
	if w.Base != "" {
		v.Base, v.Added, v.Removed, v.Replaced = p.ulid("base", w.Base, false), *w.Added, *w.Removed, *w.Replaced
	}
	return validated(v, p.err)
}

func isSHA256Hex(s string) bool { return len(s) == 64 && isLowerHex(s) }

// Upload is an upload record at UploadKey: written before its multipart upload
// is created, so cleanup finds every upload graft starts by listing objects
// (docs/format.md, *Upload records*).
type Upload struct {
	ObjectKey string // the data object the upload writes (ObjectKey)
	UploadID  string // the multipart upload's id; "" until the upload is created
	CreatedAt time.Time
}

type uploadWire struct {
	Format    int    `json:"format"`
	Kind      Kind   `json:"kind"`
	ObjectKey string `json:"object_key"`
	UploadID  string `json:"upload_id,omitempty"`
	CreatedAt string `json:"created_at"`
}

// Validate reports the first invalid field of u.
func (u Upload) Validate() error {
	_, _, _, keyErr := ParseObjectKey(u.ObjectKey)
	return firstBad(KindUpload, fieldCheck{"object_key", "", keyErr},
		fieldCheck{"upload_id", checkText(u.UploadID, MaxUploadID, false), nil},
		fieldCheck{"created_at", checkTime(u.CreatedAt), nil})
}

// EncodeUpload returns the canonical bytes of u.
func EncodeUpload(u Upload) ([]byte, error) {
	return encodeWire(KindUpload, u.Validate(), uploadWire{Format: Version, Kind: KindUpload,
		ObjectKey: u.ObjectKey, UploadID: u.UploadID, CreatedAt: FormatTime(u.CreatedAt)})
}

// DecodeUpload strictly decodes an upload record.
func DecodeUpload(b []byte) (Upload, error) {
	w, err := decodeWire[uploadWire](b, KindUpload)
	if err != nil {
		return Upload{}, err
	}
	p := fieldParser{k: KindUpload}
	u := Upload{ObjectKey: w.ObjectKey, UploadID: w.UploadID, CreatedAt: p.time("created_at", w.CreatedAt)}
	return validated(u, p.err)
}
