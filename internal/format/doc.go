// Package format is graft's on-storage format (format version Version, 2):
// the keys under a graph's prefix, the JSON control objects stored at them
// (graph record, table version, commit, branch ref, tag, map chunks), and the
// rules for the names that appear in them. docs/format.md is the
// human-readable spec; this package is its only implementation.
//
// Commits are content-addressed (commit.go), a live ref is its tree's head
// pointer (branchref.go), and a table's entries, a commit's pins and its
// lineage are chunked maps (maps.go).
//
// Invariants every function here keeps:
//
//   - Encoding is deterministic. Encode* is a pure function of the value: the
//     same value always yields the same bytes (fixed field order, sorted map
//     keys, times as UTC with nine fractional digits, no floats). Nothing in
//     this package reads a clock or mints an identifier; callers pass times,
//     ULIDs and operation ids in, so a re-issued write is byte-identical.
//   - Decoding is strict. Decode* accepts exactly one JSON object of the
//     expected kind and format version, no unknown, duplicate, missing or null
//     fields, no trailing data, valid UTF-8, and every field valid; anything
//     else is a typed error (ErrMalformed, ErrUnsupportedFormat, ErrTooLarge,
//     ErrInvalidName) that names the field and the reason.
//   - Whatever decodes re-encodes to bytes that decode to an equal value.
//   - Every control object is at most MaxObjectSize bytes; both directions
//     enforce it.
//   - Names are validated in one place (names.go); key builders assume
//     validated inputs and never produce a key that is another key's prefix
//     followed by '/'.
package format
