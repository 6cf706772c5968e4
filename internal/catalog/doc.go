// Package catalog is graft's ledger: the control plane's memory of operations, kept in
// Postgres through pgx. Object storage stays the authority for what exists; the ledger
// records what graft intended, what is in doubt, and what must not be reclaimed yet.
//
// # Tables
//
//   - graphs: the graphs graft knows about.
//   - operations: the audit log. An operation is running, then possibly in_doubt, then
//     done with exactly one outcome from the shared vocabulary (created, unpublished,
//     in_doubt, conflict, not_found, not_retained, invalid, refused, done, merged, adopted,
//     already_up_to_date, deleted). done is final.
//   - incarnations: the witness, written before each storage effect of a branch create.
//     A unique partial index makes "at most one unsettled-or-live incarnation per (graph,
//     logical)" a database fact: a second intent fails with ErrIncarnationExists until the
//     first is unpublished or retired.
//   - op_pins: keys an in-flight operation needs retained.
//   - cleanup_runs and cleanup_condemned: a cleanup run and the keys it decided to reclaim.
//
// The schema itself lives in package migrations; Open refuses a schema without it.
//
// # The online-safety handshake between cleanup and operations
//
// Cleanup runs while operations run. The property: an operation that adds a reference while
// a sweep runs is either seen by the sweep or refused — it never publishes a reference to
// something deleted. The ledger enforces its half under one per-graph lock
// (an advisory transaction lock on a hash of schema and graph), taken by every write that
// moves the line between "pinned" and "condemned": in shared mode by the operations' side
// (PinsRegister, PinsRelease, OperationFinish), so operations of one graph never wait for
// each other, and exclusively by the cleanup side (CleanupRunInsert, CleanupRunFinish,
// CondemnedAdd), so a pin and a condemnation of one graph never interleave:
//
//   - PinsRegister refuses with ErrCondemned (a *CondemnedError listing the keys) if any pin
//     is in the condemned set (state condemned or deleted) of a running mark or sweep run of
//     the graph; otherwise it records every pin.
//   - CondemnedAdd skips every key that is pinned — held now, or released after the run
//     started — and reports the skipped keys; it condemns the rest.
//   - PinsRelease (and OperationFinish, which releases the operation's pins) does not forget
//     a pin while a run that started before the release is still running, so such a run
//     keeps treating the key as pinned.
//
// Keys are storage keys, compared exactly, except that a key ending in "/" stands for
// every key under it: condemning "g/trees/t/" conflicts with a pin on "g/trees/t/0001.json"
// and the other way round.
//
// The other half is the callers' discipline:
//
//   - An operation pins every key it will publish a reference to (a source commit and each
//     table version it pins, say), then probes storage that each still exists (missing →
//     not_retained), then publishes, and releases its pins only afterwards. ErrCondemned
//     means not_retained.
//   - A cleanup run is inserted (CleanupRunInsert) before it reads the graph's roots (refs,
//     tags, PinsList), condemns with CondemnedAdd and deletes only keys CondemnedAdd
//     accepted, recording each with CondemnedMarkDeleted; it is finished (CleanupRunFinish)
//     only after its last deletion.
//
// With both halves, for any key either the pin came first (the run skips it), or the
// condemnation came first (the pin is refused), or the operation published and released
// before the run started (the run reads the reference among its roots).
//
// # Conventions
//
// Queries take a Params struct and are named Noun+Verb. Writes a caller may want inside
// its own transaction have a …Tx twin taking a pgx.Tx (see InTx); a Tx twin that takes the
// graph lock holds it until that transaction ends. Writes are idempotent where a retried
// activity may repeat them: repeating an insert with the same content returns the existing
// row, and a state change to the state the row is already in succeeds. Rollbacks run on a
// context that cannot be cancelled, so a cancelled request never leaves a transaction open.
//
// Errors are typed: ErrNotFound, ErrDuplicate (ErrIncarnationExists is one),
// ErrStateConflict, ErrCondemned, ErrInvalid, ErrUnavailable, ErrNotMigrated. No pgx error
// type leaks out of this package.
package catalog
