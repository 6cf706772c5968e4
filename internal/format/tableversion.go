package format

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"
)

// MaxObjectsPerVersion is the most data objects one table version lists. It
// follows from MaxObjectSize: with every other field at its maximum length
// (table name, op) and every entry at its maximum (19-digit size), a manifest
// of this many entries still fits. Encoding more is a TooLargeError.
const MaxObjectsPerVersion = (MaxObjectSize - maxTableVersionOverhead) / maxObjectEntryLen

const (
	// maxObjectEntryLen is the longest encoded object entry, with its comma.
	maxObjectEntryLen = len(`{"id":"`) + ulid.EncodedSize + len(`","size":`) + 19 +
		len(`,"sha256":"`) + 64 + len(`"}`) + len(`,`)
	// maxTableVersionOverhead is the longest encoding of everything else.
	maxTableVersionOverhead = len(`{"format":1,"kind":"table_version","table":"`) + MaxTableNameLen +
		len(`","id":"`) + ulid.EncodedSize + len(`","objects":[`) + len(`],"created_at":"`) +
		len(TimeLayout) - len("Z07:00") + len("Z") + len(`","op":"`) + MaxOpLen + len(`"}`)
)

// ObjectEntry is one data object of a table version.
type ObjectEntry struct {
	ID     ulid.ULID // the object's key is ObjectKey(graph, table, ID)
	Size   int64     // bytes
	SHA256 string    // lower-case hex of the SHA-256 of the bytes
}

// TableVersion is an immutable table version manifest at TableVersionKey.
type TableVersion struct {
	Table     string
	ID        ulid.ULID
	Objects   []ObjectEntry // strictly ascending by ID
	CreatedAt time.Time
	Op        string
}

type objectEntryWire struct {
	ID     string `json:"id"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

type tableVersionWire struct {
	Format    int               `json:"format"`
	Kind      Kind              `json:"kind"`
	Table     string            `json:"table"`
	ID        string            `json:"id"`
	Objects   []objectEntryWire `json:"objects"`
	CreatedAt string            `json:"created_at"`
	Op        string            `json:"op"`
}

var (
	tableVersionFields = fieldSet{required: []string{"format", "kind", "table", "id", "objects", "created_at", "op"}}
	objectEntryFields  = fieldSet{required: []string{"id", "size", "sha256"}}
)

// SortObjectEntries sorts entries by ID, the order a TableVersion requires.
func SortObjectEntries(entries []ObjectEntry) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].ID.Compare(entries[j].ID) < 0 })
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
	if len(v.Objects) > MaxObjectsPerVersion {
		return &TooLargeError{Kind: k, What: "objects", Size: int64(len(v.Objects)), Limit: int64(MaxObjectsPerVersion)}
	}
	for i, o := range v.Objects {
		field := "objects[" + strconv.Itoa(i) + "]"
		if o.ID.IsZero() {
			return malformed(k, field+".id", "zero ULID")
		}
		if i > 0 && v.Objects[i-1].ID.Compare(o.ID) >= 0 {
			return malformed(k, field+".id", "objects not strictly ascending by id")
		}
		if o.Size < 0 {
			return malformed(k, field+".size", "negative")
		}
		if !isSHA256Hex(o.SHA256) {
			return malformed(k, field+".sha256", "not 64 lower-case hex digits")
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

// EncodeTableVersion returns the canonical bytes of v.
func EncodeTableVersion(v TableVersion) ([]byte, error) {
	if err := v.Validate(); err != nil {
		return nil, err
	}
	w := tableVersionWire{
		Format:    Version,
		Kind:      KindTableVersion,
		Table:     v.Table,
		ID:        v.ID.String(),
		Objects:   make([]objectEntryWire, 0, len(v.Objects)),
		CreatedAt: FormatTime(v.CreatedAt),
		Op:        v.Op,
	}
	for _, o := range v.Objects {
		w.Objects = append(w.Objects, objectEntryWire{ID: o.ID.String(), Size: o.Size, SHA256: o.SHA256})
	}
	return encodeWire(KindTableVersion, w)
}

// DecodeTableVersion strictly decodes a table version manifest.
func DecodeTableVersion(b []byte) (TableVersion, error) {
	const k = KindTableVersion
	top, err := decodeEnvelope(b, k, tableVersionFields)
	if err != nil {
		return TableVersion{}, err
	}
	var entries []map[string]json.RawMessage
	if err := json.Unmarshal(top["objects"], &entries); err != nil {
		return TableVersion{}, &MalformedError{Kind: k, Field: "objects", Reason: "not an array of objects", Err: err}
	}
	if len(entries) > MaxObjectsPerVersion {
		return TableVersion{}, &TooLargeError{Kind: k, What: "objects", Size: int64(len(entries)), Limit: int64(MaxObjectsPerVersion)}
	}
	for i, m := range entries {
		if err := checkFields(k, fmt.Sprintf("objects[%d].", i), m, objectEntryFields); err != nil {
			return TableVersion{}, err
		}
	}
	var w tableVersionWire
	if err := unmarshalWire(k, b, &w); err != nil {
		return TableVersion{}, err
	}
	v := TableVersion{Table: w.Table, Op: w.Op}
	if v.ID, err = ParseULID(w.ID); err != nil {
		return TableVersion{}, malformedErr(k, "id", err)
	}
	for i, o := range w.Objects {
		id, err := ParseULID(o.ID)
		if err != nil {
			return TableVersion{}, malformedErr(k, fmt.Sprintf("objects[%d].id", i), err)
		}
		v.Objects = append(v.Objects, ObjectEntry{ID: id, Size: o.Size, SHA256: o.SHA256})
	}
	var why string
	if v.CreatedAt, why = parseTime(w.CreatedAt); why != "" {
		return TableVersion{}, malformed(k, "created_at", why)
	}
	if err := v.Validate(); err != nil {
		return TableVersion{}, err
	}
	return v, nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
