// Package graph is graft's data plane: the storage steps of graph init,
// table writes, commits and branch resolution, as plain functions over a
// storage.Store that read and write format v1 objects (internal/format).
//
// Invariants:
//
//   - Nothing is overwritten blindly. Every control object and data object is
//     written with put-if-absent. The only replacements are compare-and-swaps
//     (If-Match) that turn a live ref into a retired ref or a fence and never
//     back: InitGraph fencing its own orphaned main ref after losing the graph
//     record, RetireRef (branch delete and repair) and RetireTag.
//   - Callers mint every ULID, time and operation id and pass them in, so the
//     bytes of each write are a pure function of the call's parameters and a
//     re-run, or a re-issue after an ambiguous put, is byte-identical.
//   - An ambiguous or failed-condition put is settled by reading the key back:
//     our bytes mean success (the acknowledgement was lost), other bytes mean
//     another writer got there first (a typed conflict), absence means the put
//     has not landed and is re-issued, at most MaxPutAttempts times in all.
//     Still unknown after that is an *InDoubtError matching
//     storage.ErrAmbiguous that carries the exact bytes to settle with later.
//   - Reads cost O(1) requests whatever the history length: a commit is one
//     GET, a tree's head is one LIST with Limit 1 plus one GET.
//   - Objects read from storage are decoded strictly; a malformed, oversize
//     or unknown-format object surfaces as the format package's typed error.
package graph
