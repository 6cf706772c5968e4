package format

import (
	"time"

	"github.com/oklog/ulid/v2"
)

// Format-2 branch refs, graph records, tags and table versions. Each shares
// its Go type with format 1 (the fields only format 2 has are zero in a
// format-1 value) and has its own encoder and decoder; the *Any decoders
// read either format and say which.

// ---- branch ref ----

type branchRefV2Wire struct {
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

var branchRefV2Fields = fieldSet{
	required: []string{"format", "kind", "state", "native", "op"},
	optional: []string{"branch", "tree", "head", "retired_op", "reason"},
}

// ValidateV2 reports the first invalid field of r as a format-2 ref: the
// format-1 rules, plus Head, which a live or retired ref must name (a commit
// of the ref's own tree) and a fence must not.
func (r BranchRef) ValidateV2() error {
	const k = KindBranchRef
	head := r.Head
	r.Head = CommitID{}
	if err := r.Validate(); err != nil {
		return err
	}
	switch {
	case r.State == RefFence && !head.IsZero():
		return malformed(k, "head", "set on a fence")
	case r.State != RefFence && head.IsZero():
		return malformed(k, "head", "required on a "+string(r.State)+" ref")
	case r.State != RefFence && (head.Tree != r.Tree || head.Seq < 0):
		return malformed(k, "head", "not a commit of the ref's tree")
	}
	return nil
}

// EncodeBranchRefV2 returns the canonical bytes of r as a format-2 ref.
func EncodeBranchRefV2(r BranchRef) ([]byte, error) {
	if err := r.ValidateV2(); err != nil {
		return nil, err
	}
	w := branchRefV2Wire{Format: Version2, Kind: KindBranchRef, State: r.State, Branch: r.Branch, Native: r.Native,
		Op: r.Op, RetiredOp: r.RetiredOp, Reason: r.Reason}
	if !r.Tree.IsZero() {
		w.Tree = r.Tree.String()
	}
	if !r.Head.IsZero() {
		w.Head = r.Head.String()
	}
	return encodeWire(KindBranchRef, w)
}

// DecodeBranchRefV2 strictly decodes a format-2 branch ref.
func DecodeBranchRefV2(b []byte) (BranchRef, error) {
	const k = KindBranchRef
	if _, err := decodeEnvelopeVersion(b, k, branchRefV2Fields, Version2); err != nil {
		return BranchRef{}, err
	}
	var w branchRefV2Wire
	if err := unmarshalWire(k, b, &w); err != nil {
		return BranchRef{}, err
	}
	r := BranchRef{State: w.State, Branch: w.Branch, Native: w.Native, Op: w.Op, RetiredOp: w.RetiredOp, Reason: w.Reason}
	var err error
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
	if err := r.ValidateV2(); err != nil {
		return BranchRef{}, err
	}
	return r, nil
}

// DecodeBranchRefAny decodes a branch ref of either format and returns its
// format version.
func DecodeBranchRefAny(b []byte) (BranchRef, int, error) {
	if peekFormat(b) == Version2 {
		r, err := DecodeBranchRefV2(b)
		return r, Version2, err
	}
	r, err := DecodeBranchRef(b)
	return r, Version, err
}

// EncodeBranchRefAny encodes r in the given format version.
func EncodeBranchRefAny(r BranchRef, version int) ([]byte, error) {
	if version == Version2 {
		return EncodeBranchRefV2(r)
	}
	return EncodeBranchRef(r)
}

// ---- graph record ----

type graphV2Wire struct {
	Format        int    `json:"format"`
	Kind          Kind   `json:"kind"`
	Name          string `json:"name"`
	CreatedAt     string `json:"created_at"`
	Op            string `json:"op"`
	DefaultBranch string `json:"default_branch"`
	UpgradeOp     string `json:"upgrade_op,omitempty"`
}

var graphV2Fields = fieldSet{
	required: []string{"format", "kind", "name", "created_at", "op", "default_branch"},
	optional: []string{"upgrade_op"},
}

// EncodeGraphV2 returns the canonical bytes of g as a format-2 graph record.
func EncodeGraphV2(g Graph) ([]byte, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	if g.UpgradeOp != "" {
		if why := checkOp(g.UpgradeOp); why != "" {
			return nil, malformed(KindGraph, "upgrade_op", why)
		}
	}
	return encodeWire(KindGraph, graphV2Wire{Format: Version2, Kind: KindGraph, Name: g.Name, CreatedAt: FormatTime(g.CreatedAt),
		Op: g.Op, DefaultBranch: g.DefaultBranch, UpgradeOp: g.UpgradeOp})
}

// DecodeGraphV2 strictly decodes a format-2 graph record.
func DecodeGraphV2(b []byte) (Graph, error) {
	if _, err := decodeEnvelopeVersion(b, KindGraph, graphV2Fields, Version2); err != nil {
		return Graph{}, err
	}
	var w graphV2Wire
	if err := unmarshalWire(KindGraph, b, &w); err != nil {
		return Graph{}, err
	}
	created, why := parseTime(w.CreatedAt)
	if why != "" {
		return Graph{}, malformed(KindGraph, "created_at", why)
	}
	g := Graph{Name: w.Name, CreatedAt: created, Op: w.Op, DefaultBranch: w.DefaultBranch, UpgradeOp: w.UpgradeOp}
	if err := g.Validate(); err != nil {
		return Graph{}, err
	}
	if g.UpgradeOp != "" {
		if why := checkOp(g.UpgradeOp); why != "" {
			return Graph{}, malformed(KindGraph, "upgrade_op", why)
		}
	}
	return g, nil
}

// DecodeGraphAny decodes a graph record of either format and returns its
// format version.
func DecodeGraphAny(b []byte) (Graph, int, error) {
	if peekFormat(b) == Version2 {
		g, err := DecodeGraphV2(b)
		return g, Version2, err
	}
	g, err := DecodeGraph(b)
	return g, Version, err
}

// ---- tag ----

// EncodeTagV2 returns the canonical bytes of t as a format-2 tag, which may
// name a commit of either format.
func EncodeTagV2(t Tag) ([]byte, error) {
	if err := t.validate(true); err != nil {
		return nil, err
	}
	return encodeWire(KindTag, tagWire{Format: Version2, Kind: KindTag, State: t.State, Name: t.Name, Commit: t.Commit.String(),
		Op: t.Op, CreatedAt: FormatTime(t.CreatedAt), RetiredOp: t.RetiredOp})
}

// DecodeTagV2 strictly decodes a format-2 tag.
func DecodeTagV2(b []byte) (Tag, error) {
	return decodeTag(b, Version2)
}

// DecodeTagAny decodes a tag of either format and returns its format version.
func DecodeTagAny(b []byte) (Tag, int, error) {
	if peekFormat(b) == Version2 {
		t, err := DecodeTagV2(b)
		return t, Version2, err
	}
	t, err := DecodeTag(b)
	return t, Version, err
}

// ---- table version ----

// TableVersionV2 is a format-2 table version at TableVersionKey: its
// entries are a map (inline or chunked, under the table's chunks/), so a
// version has no ceiling on its objects.
type TableVersionV2 struct {
	Table string
	ID    ulid.ULID
	// Entries are the version's entries, by name.
	Entries MapRef[ManifestEntry]
	// Bytes is the total size of the entries' objects.
	Bytes     int64
	CreatedAt time.Time
	Op        string
}

type tableVersionV2Wire struct {
	Format    int        `json:"format"`
	Kind      Kind       `json:"kind"`
	Table     string     `json:"table"`
	ID        string     `json:"id"`
	Entries   mapRefJSON `json:"entries"`
	Bytes     int64      `json:"bytes"`
	CreatedAt string     `json:"created_at"`
	Op        string     `json:"op"`
}

var tableVersionV2Fields = fieldSet{required: []string{"format", "kind", "table", "id", "entries", "bytes", "created_at", "op"}}

// Validate reports the first invalid field of v.
func (v TableVersionV2) Validate() error {
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
	if v.Bytes < 0 {
		return malformed(k, "bytes", "negative")
	}
	if v.Entries.IsInline() {
		var sum int64
		for _, e := range v.Entries.Entries {
			sum += e.Size
		}
		if sum != v.Bytes {
			return malformed(k, "bytes", "not the total size of the entries")
		}
	}
	if why := checkTime(v.CreatedAt); why != "" {
		return malformed(k, "created_at", why)
	}
	if why := checkOp(v.Op); why != "" {
		return malformed(k, "op", why)
	}
	return nil
}

// EncodeTableVersionV2 returns the canonical bytes of v.
func EncodeTableVersionV2(v TableVersionV2) ([]byte, error) {
	if err := v.Validate(); err != nil {
		return nil, err
	}
	entries, _ := ManifestMap.refWire(KindTableVersion, "entries", v.Entries)
	return encodeWire(KindTableVersion, tableVersionV2Wire{Format: Version2, Kind: KindTableVersion, Table: v.Table, ID: v.ID.String(),
		Entries: entries, Bytes: v.Bytes, CreatedAt: FormatTime(v.CreatedAt), Op: v.Op})
}

// DecodeTableVersionV2 strictly decodes a format-2 table version.
func DecodeTableVersionV2(b []byte) (TableVersionV2, error) {
	const k = KindTableVersion
	top, err := decodeEnvelopeVersion(b, k, tableVersionV2Fields, Version2)
	if err != nil {
		return TableVersionV2{}, err
	}
	if raw := top["entries"]; len(raw) == 0 || raw[0] != '{' {
		return TableVersionV2{}, malformed(k, "entries", "not an object")
	}
	var w struct {
		Table     string `json:"table"`
		ID        string `json:"id"`
		Bytes     int64  `json:"bytes"`
		CreatedAt string `json:"created_at"`
		Op        string `json:"op"`
	}
	if err := unmarshalWire(k, stripFields(top, "entries"), &w); err != nil {
		return TableVersionV2{}, err
	}
	v := TableVersionV2{Table: w.Table, Bytes: w.Bytes, Op: w.Op}
	if v.ID, err = ParseULID(w.ID); err != nil {
		return TableVersionV2{}, malformedErr(k, "id", err)
	}
	if v.Entries, err = ManifestMap.decodeRef(k, "entries", top["entries"]); err != nil {
		return TableVersionV2{}, err
	}
	var why string
	if v.CreatedAt, why = parseTime(w.CreatedAt); why != "" {
		return TableVersionV2{}, malformed(k, "created_at", why)
	}
	if err := v.Validate(); err != nil {
		return TableVersionV2{}, err
	}
	return v, nil
}

// PeekFormat returns the "format" field of an object's bytes, 0 when it has
// none that is an integer.
func PeekFormat(b []byte) int64 { return peekFormat(b) }
