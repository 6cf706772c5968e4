package format

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
)

// A map (a version's entries, a commit's pins and lineage) is sorted entries,
// inline when small, else a tree of content-addressed chunks: leaves of entries,
// nodes naming chunks below by last key and count. Chunks split by the entries
// alone (BoundaryAfter), so equal maps are equal trees and diffs skip shared chunks.

// MapKind names what a map holds; it is the "map" field of its chunks.
type MapKind string

const (
	MapManifest MapKind = "manifest" // a table version's entries, by name
	MapPins     MapKind = "pins"     // a commit's table versions, by table name
	MapLineage  MapKind = "lineage"  // per other tree with an ancestor, its highest ancestor seq
)

const (
	KindMapLeaf Kind = "map_leaf"
	KindMapNode Kind = "map_node"
)

// Map shape parameters: part of the format, they decide every chunk's bytes.
const (
	// A map is inline exactly when it has at most MapInlineMaxEntries entries
	// encoding to at most MapInlineMaxBytes (the JSON array included).
	MapInlineMaxEntries = 64
	MapInlineMaxBytes   = 8 << 10
	// The expected items per chunk (see BoundaryAfter): a manifest's, and a pins or
	// lineage map's.
	ManifestBoundaryModulus = 512
	MapBoundaryModulus      = 128
	MaxMapLevel             = 40   // bounds a node's level (a leaf is level 0)
	MaxEntryNameLen         = 1024 // bounds a manifest entry's name and an external key
	MaxETagLen              = 256  // bounds an external object's ETag
)

// BoundaryAfter reports whether a chunk of this map at level ends after the item
// with key (a node's child's last key): when boundaryHash(level, key) is 0
// modulo ManifestBoundaryModulus for a manifest, MapBoundaryModulus for pins and
// lineage. A chunk also ends before an item that would take it over
// MaxChunkSize, and at the end of the map; nothing else ends a chunk.
func (m MapSpec[E]) BoundaryAfter(level int, key string) bool {
	modulus := uint64(MapBoundaryModulus)
	if m.Kind == MapManifest {
		modulus = ManifestBoundaryModulus
	}
	return boundaryHash(level, key)%modulus == 0
}

// boundaryHash is the first 8 bytes of SHA-256("graft-map-boundary" 0x00 level
// key), little-endian.
func boundaryHash(level int, key string) uint64 {
	h := sha256.New()
	h.Write([]byte("graft-map-boundary\x00"))
	h.Write([]byte{byte(level)})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return binary.LittleEndian.Uint64(sum[:8])
}

// ManifestEntry is one entry of a table version: a named data object, either
// one graft wrote at ObjectKey(graph, table, Object) or External, the key of
// an object imported by reference, which graft did not write, never deletes,
// and which is never under the graph's prefix; exactly one of them is set.
type ManifestEntry struct {
	// Name is the entry's key: 1..MaxEntryNameLen bytes of '/'-separated segments
	// (none empty, "." or "..", no control character or backslash).
	Name     string
	Object   ulid.ULID
	External string
	Size     int64  // 0..MaxEntrySize
	SHA256   string // hex SHA-256 of the bytes: required unless External
	ETag     string // what a HEAD of an external object returned at import; external only
}

const MaxEntrySize = 5 << 40 // the largest object an entry may name: 5 TiB

// IsExternal reports whether e names an object graft did not write.
func (e ManifestEntry) IsExternal() bool { return e.External != "" }

// PinEntry is one entry of a commit's pins: the version of a table.
type PinEntry struct {
	Table   string
	Version ulid.ULID
	// Base, when set, is another version of the table, and Added, Removed and Replaced
	// the entries that differ from it to Version: what a merge adopting Version over a
	// target that pins Base reports, without reading either version. The commit that
	// set the pin counted them; Base may have been reclaimed since.
	Base                     ulid.ULID
	Added, Removed, Replaced int64
}

// Change returns the pin with its counts from base: e.Version's entries differ from
// base's by added new names, removed dropped ones and replaced changed ones.
func (e PinEntry) Change(base ulid.ULID, added, removed, replaced int64) PinEntry {
	e.Base, e.Added, e.Removed, e.Replaced = base, added, removed, replaced
	return e
}

// LineageEntry is one entry of a commit's lineage: the id of the highest
// ancestor in another tree, so the commit can be read by id.
type LineageEntry CommitID

// ID returns the id of the commit the entry names.
func (e LineageEntry) ID() CommitID { return CommitID(e) }

// LineageOf returns the lineage entry naming commit id.
func LineageOf(id CommitID) LineageEntry { return LineageEntry(id) }

// ChildRef is a node's reference to one chunk of the level below.
type ChildRef struct {
	Last  string // the key of the last entry under the child
	Count int64  // the entries under the child, at least 1
	Chunk Hash   // the hash (and so the key) of the child chunk
}

// MapNode is a non-leaf chunk: the chunks of level Level-1, in key order.
type MapNode struct {
	Level    int
	Children []ChildRef
}

// MapRef is how an object names a map: inline Entries (Root zero), or the
// Root chunk and Count entries. The zero MapRef is the empty inline map.
type MapRef[E any] struct {
	Entries []E
	Root    Hash
	Count   int64
}

// IsInline reports whether r holds its entries itself.
func (r MapRef[E]) IsInline() bool { return r.Root.IsZero() }

// Len returns the number of entries of the map.
func (r MapRef[E]) Len() int64 {
	if r.IsInline() {
		return int64(len(r.Entries))
	}
	return r.Count
}

// MapSpec is one kind of map's keys, wire form and validation (ManifestMap, PinsMap, LineageMap).
type MapSpec[E any] struct {
	Kind     MapKind
	Key      func(E) string
	checkKey func(s string) string       // why s is not a valid key, or ""
	validate func(E) (field, why string) // field names are relative to the entry
	wire     func(E) any                 // the entry's JSON wire value (fixed field order)
	fields   fieldSet                    // the entry's JSON fields
	// decodeAll decodes a JSON array of entries in one pass, naming the entry and field it fails on.
	decodeAll func(raw []byte) ([]E, int, string, error)
	// scan reads one entry as json.Marshal writes it (readLeaf), false for anything else.
	scan func(s *leafScanner) (E, bool)
	// append appends the entry's encoding: json.Marshal(wire(e)), without reflection.
	append func(b []byte, e E) []byte
}

// decodeAll makes a MapSpec.decodeAll from a conversion of one wire entry.
func decodeAll[W, E any](conv func(W) (E, string, error)) func([]byte) ([]E, int, string, error) {
	return func(raw []byte) ([]E, int, string, error) {
		var ws []W
		if err := json.Unmarshal(raw, &ws); err != nil {
			return nil, -1, "", err
		}
		out := make([]E, len(ws))
		for i, w := range ws {
			e, field, err := conv(w)
			if err != nil {
				return nil, i, field, err
			}
			out[i] = e
		}
		return out, 0, "", nil
	}
}

// ManifestMap is the map of a table version's entries.
var ManifestMap = MapSpec[ManifestEntry]{
	Kind:     MapManifest,
	Key:      func(e ManifestEntry) string { return e.Name },
	checkKey: checkEntryName,
	validate: validateManifestEntry,
	wire: func(e ManifestEntry) any {
		w := manifestEntryWire{Name: e.Name, External: e.External, Size: e.Size, SHA256: e.SHA256, ETag: e.ETag}
		if !e.Object.IsZero() {
			w.Object = e.Object.String()
		}
		return w
	},
	fields:    fieldsOf[manifestEntryWire](),
	decodeAll: decodeAll(manifestFromWire),
	append: func(b []byte, e ManifestEntry) []byte {
		b = appendString(append(b, `{"name":`...), e.Name)
		if !e.Object.IsZero() {
			b = appendString(append(b, `,"object":`...), e.Object.String())
		}
		b = appendOpt(b, `,"external":`, e.External)
		b = strconv.AppendInt(append(b, `,"size":`...), e.Size, 10)
		b = appendOpt(b, `,"sha256":`, e.SHA256)
		return append(appendOpt(b, `,"etag":`, e.ETag), '}')
	},
	scan: scanWith(func(s *leafScanner, w *manifestEntryWire) bool {
		return s.need(`{"name":`) && s.str(&w.Name) && s.opt(`,"object":`, &w.Object) && s.opt(`,"external":`, &w.External) &&
			s.need(`,"size":`) && s.int(&w.Size) && s.opt(`,"sha256":`, &w.SHA256) && s.opt(`,"etag":`, &w.ETag) && s.need("}")
	}, manifestFromWire),
}

func manifestFromWire(w manifestEntryWire) (e ManifestEntry, _ string, err error) {
	e = ManifestEntry{Name: w.Name, External: w.External, Size: w.Size, SHA256: w.SHA256, ETag: w.ETag}
	if w.Object != "" {
		e.Object, err = ParseULID(w.Object)
	}
	return e, "object", err
}

type manifestEntryWire struct {
	Name     string `json:"name"`
	Object   string `json:"object,omitempty"`
	External string `json:"external,omitempty"`
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256,omitempty"`
	ETag     string `json:"etag,omitempty"`
}

// PinsMap is the map of a commit's table versions.
var PinsMap = MapSpec[PinEntry]{
	Kind:     MapPins,
	Key:      func(e PinEntry) string { return e.Table },
	checkKey: func(s string) string { return reason(ValidateTableName(s)) },
	validate: func(e PinEntry) (string, string) {
		if err := ValidateTableName(e.Table); err != nil {
			return "table", err.Error()
		}
		if e.Version.IsZero() {
			return "version", "zero ULID"
		}
		return checkChange(e.Version, e.Base, e.Added, e.Removed, e.Replaced)
	},
	wire: func(e PinEntry) any {
		w := pinEntryWire{Table: e.Table, Version: e.Version.String()}
		if !e.Base.IsZero() {
			w.Base, w.Added, w.Removed, w.Replaced = e.Base.String(), &e.Added, &e.Removed, &e.Replaced
		}
		return w
	},
	fields:    fieldsOf[pinEntryWire](),
	decodeAll: decodeAll(pinFromWire),
	append: func(b []byte, e PinEntry) []byte {
		b = appendString(append(b, `{"table":`...), e.Table)
		b = appendString(append(b, `,"version":`...), e.Version.String())
		if !e.Base.IsZero() {
			b = appendString(append(b, `,"base":`...), e.Base.String())
			b = strconv.AppendInt(append(b, `,"added":`...), e.Added, 10)
			b = strconv.AppendInt(append(b, `,"removed":`...), e.Removed, 10)
			b = strconv.AppendInt(append(b, `,"replaced":`...), e.Replaced, 10)
		}
		return append(b, '}')
	},
	scan: scanWith(func(s *leafScanner, w *pinEntryWire) bool {
		if !s.need(`{"table":`) || !s.str(&w.Table) || !s.need(`,"version":`) || !s.str(&w.Version) {
			return false
		}
		if s.need(`,"base":`) {
			w.Added, w.Removed, w.Replaced = new(int64), new(int64), new(int64)
			if !s.str(&w.Base) || !s.need(`,"added":`) || !s.int(w.Added) || !s.need(`,"removed":`) || !s.int(w.Removed) ||
				!s.need(`,"replaced":`) || !s.int(w.Replaced) {
				return false
			}
		}
		return s.need("}")
	}, pinFromWire),
}

func pinFromWire(w pinEntryWire) (PinEntry, string, error) {
	v, err := ParseULID(w.Version)
	if err != nil {
		return PinEntry{}, "version", err
	}
	e := PinEntry{Table: w.Table, Version: v}
	if field, why := changePresent(w.Base, w.Added, w.Removed, w.Replaced); why != "" {
		return PinEntry{}, field, errors.New(why)
	}
	if w.Base != "" {
		if e.Base, err = ParseULID(w.Base); err != nil {
			return PinEntry{}, "base", err
		}
		e.Added, e.Removed, e.Replaced = *w.Added, *w.Removed, *w.Replaced
	}
	return e, "", nil
}

// checkChange reports the first invalid field of a change recorded beside version (a
// pin's, a table version's): counts only with a base, a base other than version, no
// negative count.
func checkChange(version, base ulid.ULID, added, removed, replaced int64) (field, why string) {
	switch {
	case base.IsZero() && added|removed|replaced != 0:
		return "added", "counts without a base"
	case base == version:
		return "base", "the version itself"
	case added < 0 || removed < 0 || replaced < 0:
		return "added", "a negative count"
	}
	return "", ""
}

// changePresent reports which wire field breaks the rule that a change's base and
// its three counts are all present or all absent.
func changePresent(base string, added, removed, replaced *int64) (field, why string) {
	switch counts := added != nil && removed != nil && replaced != nil; {
	case base == "" && (added != nil || removed != nil || replaced != nil):
		return "base", "missing beside added, removed and replaced"
	case base != "" && !counts:
		return "added", "base without all of added, removed and replaced"
	}
	return "", ""
}

type pinEntryWire struct {
	Table   string `json:"table"`
	Version string `json:"version"`
	// Base and the counts are all present or all absent.
	Base     string `json:"base,omitempty"`
	Added    *int64 `json:"added,omitempty"`
	Removed  *int64 `json:"removed,omitempty"`
	Replaced *int64 `json:"replaced,omitempty"`
}

// LineageMap is the map of a commit's lineage.
var LineageMap = MapSpec[LineageEntry]{
	Kind: MapLineage,
	Key:  func(e LineageEntry) string { return e.Tree.String() },
	checkKey: func(s string) string {
		_, why := parseULID(s)
		return why
	},
	validate: func(e LineageEntry) (string, string) {
		switch {
		case e.Tree.IsZero():
			return "tree", "zero ULID"
		case e.Seq < 0:
			return "seq", "negative"
		}
		return "digest", whyIf(e.Digest.IsZero(), "zero digest")
	},

	wire: func(e LineageEntry) any {
		return lineageEntryWire{Tree: e.Tree.String(), Seq: e.Seq, Digest: e.Digest.String()}
	},
	fields:    fieldsOf[lineageEntryWire](),
	decodeAll: decodeAll(lineageFromWire),
	append: func(b []byte, e LineageEntry) []byte {
		b = appendString(append(b, `{"tree":`...), e.Tree.String())
		b = strconv.AppendInt(append(b, `,"seq":`...), e.Seq, 10)
		return append(appendString(append(b, `,"digest":`...), e.Digest.String()), '}')
	},
	scan: scanWith(func(s *leafScanner, w *lineageEntryWire) bool {
		return s.need(`{"tree":`) && s.str(&w.Tree) && s.need(`,"seq":`) && s.int(&w.Seq) &&
			s.need(`,"digest":`) && s.str(&w.Digest) && s.need("}")
	}, lineageFromWire),
}

func lineageFromWire(w lineageEntryWire) (LineageEntry, string, error) {
	t, err := ParseULID(w.Tree)
	if err != nil {
		return LineageEntry{}, "tree", err
	}
	d, why := parseDigest(w.Digest)
	return LineageEntry{Tree: t, Seq: w.Seq, Digest: d}, "digest", nameErr("digest", w.Digest, why)
}

type lineageEntryWire struct {
	Tree   string `json:"tree"`
	Seq    int64  `json:"seq"`
	Digest string `json:"digest"`
}

// checkEntryName returns why s is not a valid entry name or external key, or "".
func checkEntryName(s string) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > MaxEntryNameLen:
		return fmt.Sprintf("longer than %d bytes", MaxEntryNameLen)
	case !utf8.ValidString(s):
		return "invalid UTF-8"
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }):
		return "contains a control character or backslash"
	}
	for seg := range strings.SplitSeq(s, "/") {
		switch seg {
		case "":
			return "has an empty segment"
		case ".", "..":
			return "has a \".\" or \"..\" segment"
		}
	}
	return ""
}

// ValidateEntryName checks a manifest entry name.
func ValidateEntryName(name string) error { return nameErr("entry name", name, checkEntryName(name)) }

func validateManifestEntry(e ManifestEntry) (string, string) {
	ext := e.External != ""
	switch {
	case checkEntryName(e.Name) != "":
		return "name", checkEntryName(e.Name)
	case e.Object.IsZero() == !ext:
		return "object", "exactly one of object and external must be set"
	case e.Size < 0 || e.Size > MaxEntrySize:
		return "size", fmt.Sprintf("outside 0..%d", int64(MaxEntrySize))
	case ext && checkEntryName(e.External) != "":
		return "external", checkEntryName(e.External)
	case ext && e.ETag == "":
		return "etag", "required for an external object"
	case ext && checkETag(e.ETag) != "":
		return "etag", checkETag(e.ETag)
	case (!ext || e.SHA256 != "") && !isSHA256Hex(e.SHA256):
		return "sha256", "not 64 lower-case hex digits"
	case !ext && e.ETag != "":
		return "etag", "set on an object graft wrote"
	}
	return "", ""
}

func checkETag(s string) string {
	switch {
	case len(s) > MaxETagLen:
		return fmt.Sprintf("longer than %d bytes", MaxETagLen)
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x21 || r > 0x7e || r == '\\' }):
		return "not printable ASCII without spaces or backslashes"
	}
	return ""
}

// ValidateEntry checks one entry, as EncodeEntry does.
func (m MapSpec[E]) ValidateEntry(e E) error {
	if field, why := m.validate(e); why != "" {
		return malformed(KindMapLeaf, "entries."+field, why)
	}
	return nil
}

// EncodeEntry returns the canonical bytes of one entry.
func (m MapSpec[E]) EncodeEntry(e E) ([]byte, error) { return m.AppendEntry(nil, e) }

// AppendEntry appends the canonical bytes of one entry to b.
func (m MapSpec[E]) AppendEntry(b []byte, e E) ([]byte, error) {
	if err := m.ValidateEntry(e); err != nil {
		return b, err
	}
	return m.append(b, e), nil
}

// checkEntries validates a sorted entry list (of a leaf or inline map).
func (m MapSpec[E]) checkEntries(kind Kind, field string, entries []E) error {
	for i, e := range entries {
		f := field + "[" + strconv.Itoa(i) + "]"
		if ef, why := m.validate(e); why != "" {
			return malformed(kind, f+"."+ef, why)
		}
		if i > 0 && m.Key(entries[i-1]) >= m.Key(e) {
			return malformed(kind, f, "entries not strictly ascending by key")
		}
	}
	return nil
}

func (m MapSpec[E]) wires(entries []E) []any {
	out := make([]any, len(entries))
	for i, e := range entries {
		out[i] = m.wire(e)
	}
	return out
}

// decodeEntries strictly decodes a JSON array of entries, field names exactly (encoding/json ignores case).
func (m MapSpec[E]) decodeEntries(kind Kind, field string, raw json.RawMessage) ([]E, error) {
	if err := checkItems(kind, field, raw, m.fields); err != nil {
		return nil, err
	}
	out, i, sub, err := m.decodeAll(raw)
	if err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, &MalformedError{Kind: kind, Field: field + "." + typeErr.Field, Reason: "wrong type", Err: err}
		}
		if i < 0 {
			return nil, &MalformedError{Kind: kind, Field: field, Reason: "invalid JSON", Err: err}
		}
		return nil, malformedErr(kind, field+"["+strconv.Itoa(i)+"]."+sub, err)
	}
	if err := m.checkEntries(kind, field, out); err != nil {
		return nil, err
	}
	return out, nil
}

// checkItems checks that raw is an array of objects of exactly fields.
func checkItems(kind Kind, field string, raw json.RawMessage, fields fieldSet) error {
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return &MalformedError{Kind: kind, Field: field, Reason: "not an array of objects", Err: err}
	}
	for i, item := range items {
		if err := checkFields(kind, field+"["+strconv.Itoa(i)+"].", item, fields); err != nil {
			return err
		}
	}
	return nil
}

type leafWire struct {
	Format  int     `json:"format"`
	Kind    Kind    `json:"kind"`
	Map     MapKind `json:"map"`
	Entries []any   `json:"entries"`
}

// EncodeLeaf returns the canonical bytes of a leaf: 1 or more entries, strictly ascending by key.
func (m MapSpec[E]) EncodeLeaf(entries []E) ([]byte, error) {
	if len(entries) == 0 {
		return nil, malformed(KindMapLeaf, "entries", "a leaf has at least one entry")
	}
	return encodeWire(KindMapLeaf, m.checkEntries(KindMapLeaf, "entries", entries),
		leafWire{Format: Version, Kind: KindMapLeaf, Map: m.Kind, Entries: m.wires(entries)})
}

// LeafOverhead is the encoded size of a leaf without entries: a leaf of
// e1..en encodes to LeafOverhead + len(e1) + … + len(en) + (n-1).
func (m MapSpec[E]) LeafOverhead() int {
	return encodedLen(leafWire{Format: Version, Kind: KindMapLeaf, Map: m.Kind, Entries: []any{}})
}

func encodedLen(v any) int {
	b, _ := json.Marshal(v)
	return len(b)
}

// DecodeLeaf strictly decodes a leaf chunk of this kind.
func (m MapSpec[E]) DecodeLeaf(b []byte) ([]E, error) {
	if entries, ok := m.readLeaf(b); ok {
		return entries, nil
	}
	return m.decodeLeafStrict(b)
}

// decodeLeafStrict decodes a leaf in any spelling JSON allows, naming what is wrong.
func (m MapSpec[E]) decodeLeafStrict(b []byte) ([]E, error) {
	const k = KindMapLeaf
	top, err := m.decodeChunk(b, k, fieldsOf[leafWire]())
	if err != nil {
		return nil, err
	}
	entries, err := m.decodeEntries(k, "entries", top["entries"])
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, malformed(k, "entries", "a leaf has at least one entry")
	}
	return entries, nil
}

// decodeChunk checks a chunk's envelope and that it is of this map kind.
func (m MapSpec[E]) decodeChunk(b []byte, k Kind, fields fieldSet) (map[string]json.RawMessage, error) {
	top, err := decodeEnvelope(b, k, fields)
	if err != nil {
		return nil, err
	}
	var got MapKind
	if err := json.Unmarshal(top["map"], &got); err != nil {
		return nil, malformed(k, "map", "not a string")
	}
	if got != m.Kind {
		return nil, malformed(k, "map", fmt.Sprintf("is %q, want %q", got, m.Kind))
	}
	return top, nil
}

type childWire struct {
	Last  string `json:"last"`
	Count int64  `json:"count"`
	Chunk string `json:"chunk"`
}

type nodeWire struct {
	Format   int         `json:"format"`
	Kind     Kind        `json:"kind"`
	Map      MapKind     `json:"map"`
	Level    int         `json:"level"`
	Children []childWire `json:"children"`
}

// validateNode checks a node's fields.
func (m MapSpec[E]) validateNode(n MapNode) error {
	const k = KindMapNode
	if n.Level < 1 || n.Level > MaxMapLevel {
		return malformed(k, "level", fmt.Sprintf("outside 1..%d", MaxMapLevel))
	}
	if len(n.Children) == 0 {
		return malformed(k, "children", "a node has at least one child")
	}
	for i, c := range n.Children {
		f := "children[" + strconv.Itoa(i) + "]"
		if why := m.checkKey(c.Last); why != "" {
			return malformed(k, f+".last", why)
		}
		if i > 0 && n.Children[i-1].Last >= c.Last {
			return malformed(k, f+".last", "children not strictly ascending by last key")
		}
		if c.Count < 1 {
			return malformed(k, f+".count", "less than 1")
		}
		if c.Chunk.IsZero() {
			return malformed(k, f+".chunk", "zero hash")
		}
	}
	return nil
}

// EncodeNode returns the canonical bytes of a node chunk.
func (m MapSpec[E]) EncodeNode(n MapNode) ([]byte, error) {
	w := nodeWire{Format: Version, Kind: KindMapNode, Map: m.Kind, Level: n.Level, Children: make([]childWire, len(n.Children))}
	for i, c := range n.Children {
		w.Children[i] = childWire{Last: c.Last, Count: c.Count, Chunk: c.Chunk.String()}
	}
	return encodeWire(KindMapNode, m.validateNode(n), w)
}

// NodeOverhead is the encoded size of a node at level without children.
func (m MapSpec[E]) NodeOverhead(level int) int {
	return encodedLen(nodeWire{Format: Version, Kind: KindMapNode, Map: m.Kind, Level: level, Children: []childWire{}})
}

// ChildSize is the encoded size of one child reference in a node.
func (m MapSpec[E]) ChildSize(c ChildRef) int {
	return encodedLen(childWire{Last: c.Last, Count: c.Count, Chunk: c.Chunk.String()})
}

// DecodeNode strictly decodes a node chunk of this kind.
func (m MapSpec[E]) DecodeNode(b []byte) (MapNode, error) {
	const k = KindMapNode
	top, err := m.decodeChunk(b, k, fieldsOf[nodeWire]())
	if err != nil {
		return MapNode{}, err
	}
	if err := checkItems(k, "children", top["children"], fieldsOf[childWire]()); err != nil {
		return MapNode{}, err
	}
	var w nodeWire
	if err := unmarshalWire(k, b, &w); err != nil {
		return MapNode{}, err
	}
	n := MapNode{Level: w.Level, Children: make([]ChildRef, len(w.Children))}
	for i, c := range w.Children {
		h, err := ParseHash(c.Chunk)
		if err != nil {
			return MapNode{}, malformedErr(k, "children["+strconv.Itoa(i)+"].chunk", err)
		}
		n.Children[i] = ChildRef{Last: c.Last, Count: c.Count, Chunk: h}
	}
	if err := m.validateNode(n); err != nil {
		return MapNode{}, err
	}
	return n, nil
}

// DecodeChunk decodes a leaf or a node chunk; exactly one result is set.
func (m MapSpec[E]) DecodeChunk(b []byte) ([]E, *MapNode, error) {
	if entries, ok := m.readLeaf(b); ok {
		return entries, nil, nil
	}
	var probe struct {
		Kind Kind `json:"kind"`
	}
	_ = json.Unmarshal(b, &probe)
	if probe.Kind == KindMapNode {
		n, err := m.DecodeNode(b)
		if err != nil {
			return nil, nil, err
		}
		return nil, &n, nil
	}
	entries, err := m.decodeLeafStrict(b)
	return entries, nil, err
}

// InlineFits reports whether entries, sorted and valid, are written inline.
func (m MapSpec[E]) InlineFits(entries []E) bool {
	if len(entries) > MapInlineMaxEntries {
		return false
	}
	n := 2 + max(len(entries)-1, 0) // [ ] and commas
	for _, e := range entries {
		n += encodedLen(m.wire(e))
	}
	return n <= MapInlineMaxBytes
}

// mapRefJSON is a map ref on the wire: {"entries":[…]} inline, or "root" and "count" chunked.
type mapRefJSON struct {
	inline  bool
	entries []any
	root    string
	count   int64
}

func (r mapRefJSON) MarshalJSON() ([]byte, error) {
	if r.inline { // r.entries is never nil: an empty map is []
		return json.Marshal(struct {
			Entries []any `json:"entries"`
		}{r.entries})
	}
	return json.Marshal(struct {
		Root  string `json:"root"`
		Count int64  `json:"count"`
	}{r.root, r.count})
}

// refWire returns the wire form of r, checking it.
func (m MapSpec[E]) refWire(kind Kind, field string, r MapRef[E]) (mapRefJSON, error) {
	if r.IsInline() {
		if r.Count != 0 && r.Count != int64(len(r.Entries)) {
			return mapRefJSON{}, malformed(kind, field, "inline map with a count that is not its length")
		}
		if err := m.checkEntries(kind, field+".entries", r.Entries); err != nil {
			return mapRefJSON{}, err
		}
		if !m.InlineFits(r.Entries) {
			return mapRefJSON{}, malformed(kind, field, fmt.Sprintf("inline map over %d entries or %d bytes (write it as chunks)", MapInlineMaxEntries, MapInlineMaxBytes))
		}
		return mapRefJSON{inline: true, entries: m.wires(r.Entries)}, nil
	}
	if r.Count < 1 {
		return mapRefJSON{}, malformed(kind, field+".count", "a chunked map has at least one entry")
	}
	if len(r.Entries) != 0 {
		return mapRefJSON{}, malformed(kind, field, "both inline entries and a root")
	}
	// Whether a small chunked map should be inline depends on entry sizes the
	// ref does not carry: the writer decides.
	return mapRefJSON{root: r.Root.String(), count: r.Count}, nil
}

// decodeRef strictly decodes a map ref.
func (m MapSpec[E]) decodeRef(kind Kind, field string, raw json.RawMessage) (MapRef[E], error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return MapRef[E]{}, &MalformedError{Kind: kind, Field: field, Reason: "not an object", Err: err}
	}
	if _, inline := fields["entries"]; inline {
		if err := checkFields(kind, field+".", fields, fieldSet{required: []string{"entries"}}); err != nil {
			return MapRef[E]{}, err
		}
		entries, err := m.decodeEntries(kind, field+".entries", fields["entries"])
		if err != nil {
			return MapRef[E]{}, err
		}
		if !m.InlineFits(entries) {
			return MapRef[E]{}, malformed(kind, field, fmt.Sprintf("inline map over %d entries or %d bytes", MapInlineMaxEntries, MapInlineMaxBytes))
		}
		return MapRef[E]{Entries: entries}, nil
	}
	if err := checkFields(kind, field+".", fields, fieldSet{required: []string{"root", "count"}}); err != nil {
		return MapRef[E]{}, err
	}
	var w struct {
		Root  string `json:"root"`
		Count int64  `json:"count"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return MapRef[E]{}, &MalformedError{Kind: kind, Field: field, Reason: "wrong type", Err: err}
	}
	h, err := ParseHash(w.Root)
	if err != nil {
		return MapRef[E]{}, malformedErr(kind, field+".root", err)
	}
	if w.Count < 1 {
		return MapRef[E]{}, malformed(kind, field+".count", "a chunked map has at least one entry")
	}
	return MapRef[E]{Root: h, Count: w.Count}, nil
}
