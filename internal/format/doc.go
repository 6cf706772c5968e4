// Package format is graft's on-storage format (Version): the keys under a
// graph's prefix, the JSON control objects at them (graph record, table
// version, commit, branch ref, tag, map chunks) and the name rules.
// docs/format.md is the spec; this package its only implementation.
//
// Invariants:
//
//   - Encoding is deterministic: a pure function of the value (fixed field
//     order, sorted keys, UTC times with nine fractional digits, no floats);
//     callers pass times, ULIDs and operation ids in.
//   - Decoding is strict: one JSON object of the expected kind and version, no
//     unknown, duplicate, missing or null field, no trailing data, valid UTF-8
//     and fields; anything else is a typed error naming field and reason.
//   - Whatever decodes re-encodes to bytes that decode to an equal value.
//   - Every control object is at most MaxObjectSize bytes, a map's chunk at
//     most MaxChunkSize, both ways.
//   - No key builder makes a key that is another key's prefix plus '/'.
package format
