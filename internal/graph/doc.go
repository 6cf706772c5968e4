// Package graph is graft's data plane: init, table writes, commits, branches
// and tags as plain functions over a storage.Store, in the format of
// internal/format.
//
// Invariants:
//
//   - Nothing is overwritten blindly: every object is written put-if-absent;
//     the only replacements are compare-and-swaps that turn a live ref or tag
//     into a retired one or a fence, or move a ref's head.
//   - Callers mint every ULID, time and operation id, so each write's bytes are
//     a function of its parameters and a re-issue is byte-identical.
//   - An ambiguous or failed-condition put is settled by reading back: our
//     bytes → success, other bytes → a typed conflict, absent → re-issue, at
//     most MaxPutAttempts puts; then an *InDoubtError with the bytes to settle.
//   - Objects read are decoded strictly; bad ones are the format's typed errors.
package graph
