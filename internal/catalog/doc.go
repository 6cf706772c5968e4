// Package catalog is graft's ledger: the control plane's memory of operations, kept in
// Postgres through pgx. Object storage stays the authority for what exists; the ledger
// records what graft intended, what is in doubt, and what must not be reclaimed yet.
//
// # Tables
//
//   - graphs: the graphs graft knows about.
//   - operations: the audit log. An operation is running, then possibly in_doubt, then
//     done (final) with exactly one outcome from the shared vocabulary (Outcomes).
//   - incarnations: the witness, written before each storage effect of a branch create.
//     A unique partial index makes "at most one unsettled-or-live incarnation per (graph,
//     logical)" a database fact (ErrIncarnationExists).
//   - op_pins: keys an in-flight operation needs retained.
//   - cleanup_runs and cleanup_condemned: a cleanup run and the keys it decided to reclaim.
//
// The schema lives in package migrations; Open refuses a schema without it.
//
// # The online-safety handshake between cleanup and operations
//
// An operation that adds a reference while a sweep runs is either seen by the sweep or
// refused: it never publishes a reference to something deleted. The ledger's half is one
// per-graph advisory transaction lock, taken by every write that moves the line between
// "pinned" and "condemned": shared by the operations' side (PinsRegister, PinsRelease,
// OperationFinish), so operations never wait for each other, and exclusive by the cleanup
// side (CleanupRunInsert, CleanupRunFinish, CondemnedAdd), so a pin and a condemnation of
// one graph never interleave:
//
//   - PinsRegister refuses with a *CondemnedError if any pin is condemned (or deleted) by
//     a running mark or sweep run of the graph; otherwise it records every pin.
//   - CondemnedAdd skips, and reports, every key pinned now or released after the run
//     started; it condemns the rest.
//   - PinsRelease (and OperationFinish) keeps a released pin while a run that started
//     before the release is running.
//
// Keys are compared exactly, except that a key ending in "/" stands for every key under it.
//
// The callers' half: an operation pins every key it will publish a reference to, probes
// storage that each exists (missing → not_retained; ErrCondemned is not_retained too),
// publishes, and only then releases its pins. A cleanup run is inserted before it reads
// the graph's roots (refs, tags, PinsList), deletes only keys CondemnedAdd accepted,
// recording each with CondemnedMarkDeleted, and is finished only after its last deletion.
//
// Then for any key either the pin came first (the run skips it), or the condemnation did
// (the pin is refused), or the operation published and released before the run started
// (the run reads the reference among its roots).
//
// # Conventions
//
// Queries take a Params struct and are named Noun+Verb. A write a caller may want inside
// its own transaction has a …Tx twin taking a pgx.Tx (see InTx); a Tx twin that takes the
// graph lock holds it until that transaction ends. Writes a retried activity may repeat
// are idempotent: the same insert returns the existing row, and a move to the state the
// row is in succeeds. Rollbacks run on a context that cannot be cancelled.
//
// Errors are typed (ErrNotFound, ErrDuplicate, ErrStateConflict, ErrCondemned, ErrInvalid,
// ErrUnavailable, ErrNotMigrated, ErrNotOwner, ErrOwned); no pgx error type leaks out.
package catalog
