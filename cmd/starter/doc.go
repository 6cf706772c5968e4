// Command graft is graft's command line: the cobra commands an operator runs
// from a shell, and `graft dev`, which runs the whole local stack in one process.
//
// Invariants:
//   - Configuration is graft-worker's (cmd/internal/conncfg): flag, then
//     variable, then the profile `graft dev` writes, then the default; a bad
//     value is a usage error naming its flag or variable, reported before
//     anything is contacted. DATABASE_URL has no flag.
//   - A result goes to stdout; an error goes to stderr with the next step an
//     operator should take. With --output json (-o) each is exactly one JSON
//     object (an error's is Report).
//   - The exit code is the outcome's (rootLong lists them, docs/outcomes.md).
//   - A command opens only what it needs (Temporal, the ledger, the store),
//     lazily, and closes it before returning; it writes only to its cobra
//     command's writers.
//   - Names, commit ids and operation ids are checked locally with the
//     workflows' own rules, so a typo is exit 2 before any round trip.
package main
