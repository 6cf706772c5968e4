package format

import (
	"time"

	"github.com/oklog/ulid/v2"
)

// TableVersion is a table version at TableVersionKey; its entries are a map.
type TableVersion struct {
	Table string
	ID    ulid.ULID
	// Entries are the version's entries, by name.
	Entries MapRef[ManifestEntry]
	// Bytes is the total size of the entries' objects.
	Bytes     int64
	CreatedAt time.Time
	Op        string
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
}

var tableVersionFields = fieldSet{required: []string{"format", "kind", "table", "id", "entries", "bytes", "created_at", "op"}}

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
	return firstBad(k, fieldCheck{"created_at", checkTime(v.CreatedAt), nil}, fieldCheck{"op", checkOp(v.Op), nil})
}

// EncodeTableVersion returns the canonical bytes of v.
func EncodeTableVersion(v TableVersion) ([]byte, error) {
	if err := v.Validate(); err != nil {
		return nil, err
	}
	entries, _ := ManifestMap.refWire(KindTableVersion, "entries", v.Entries)
	return encodeWire(KindTableVersion, tableVersionWire{Format: Version, Kind: KindTableVersion, Table: v.Table, ID: v.ID.String(),
		Entries: entries, Bytes: v.Bytes, CreatedAt: FormatTime(v.CreatedAt), Op: v.Op})
}

// DecodeTableVersion strictly decodes a table version.
func DecodeTableVersion(b []byte) (TableVersion, error) {
	const k = KindTableVersion
	top, err := decodeEnvelope(b, k, tableVersionFields)
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
	v := TableVersion{Table: w.Table, Bytes: w.Bytes, Op: w.Op}
	if v.ID, err = ParseULID(w.ID); err != nil {
		return TableVersion{}, malformedErr(k, "id", err)
	}
	if v.Entries, err = ManifestMap.decodeRef(k, "entries", top["entries"]); err != nil {
		return TableVersion{}, err
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

func isSHA256Hex(s string) bool { return len(s) == 64 && isLowerHex(s) }
