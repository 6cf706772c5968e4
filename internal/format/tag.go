package format

import "time"

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
	// RetiredOp is the operation that retired the tag; set iff State is TagRetired.
	RetiredOp string
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

var tagFields = fieldSet{
	required: []string{"format", "kind", "state", "name", "commit", "op", "created_at"},
	optional: []string{"retired_op"},
}

// Validate reports the first invalid field of t.
func (t Tag) Validate() error {
	const k = KindTag
	if t.State != TagLive && t.State != TagRetired {
		return malformed(k, "state", "not live or retired")
	}
	commit := ""
	if !t.Commit.valid() {
		commit = "not a commit id"
	}
	return firstBad(k, fieldCheck{"name", "", ValidateTagName(t.Name)}, fieldCheck{"commit", commit, nil},
		fieldCheck{"op", checkOp(t.Op), nil}, fieldCheck{"created_at", checkTime(t.CreatedAt), nil},
		fieldCheck{"retired_op", onlyIf(t.State == TagRetired, t.RetiredOp, checkOp, "live tag"), nil})
}

// EncodeTag returns the canonical bytes of t.
func EncodeTag(t Tag) ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return encodeWire(KindTag, tagWire{
		Format:    Version,
		Kind:      KindTag,
		State:     t.State,
		Name:      t.Name,
		Commit:    t.Commit.String(),
		Op:        t.Op,
		CreatedAt: FormatTime(t.CreatedAt),
		RetiredOp: t.RetiredOp,
	})
}

// DecodeTag strictly decodes a tag.
func DecodeTag(b []byte) (Tag, error) {
	const k = KindTag
	w, err := decodeWire[tagWire](b, k, tagFields)
	if err != nil {
		return Tag{}, err
	}
	t := Tag{State: w.State, Name: w.Name, Op: w.Op, RetiredOp: w.RetiredOp}
	if t.Commit, err = ParseCommitID(w.Commit); err != nil {
		return Tag{}, malformedErr(k, "commit", err)
	}
	var why string
	if t.CreatedAt, why = parseTime(w.CreatedAt); why != "" {
		return Tag{}, malformed(k, "created_at", why)
	}
	if err := t.Validate(); err != nil {
		return Tag{}, err
	}
	return t, nil
}
