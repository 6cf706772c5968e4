// Command graft is graft's command line: the cobra commands an operator runs
// from a shell, and `graft dev`, which runs the whole local stack in one process.
//
// Invariants:
//   - Configuration follows graft-worker's conventions (cmd/internal/workercmd):
//     the same flag names and environment variables, a flag given on the
//     command line wins over its variable, which wins over the default, and a
//     bad value is a usage error naming the flag or variable, reported before
//     anything is contacted. DATABASE_URL is read only from the environment
//     (or the profile). A profile file — the one `graft dev` writes, found
//     without a flag — fills what flags and variables leave unset.
//   - Every command accepts --output text|json (-o). A result goes to stdout;
//     in json mode it is exactly one JSON object. An error goes to stderr,
//     with the next step an operator should take; in json mode it is one JSON
//     object {"outcome", "exit_code", "op_id", "message", "next"} (and
//     "conflicts", the tables, for a merge conflict).
//   - The exit code is the outcome's (outcome.ExitCode; rootLong lists them,
//     docs/outcomes.md documents each); 9 unavailable when Temporal,
//     Postgres or the store could not be reached.
//   - A command opens only what it needs (Temporal, the ledger, the store),
//     lazily, and closes it before returning. Nothing here writes to the
//     process's stdout or stderr directly: commands write to their cobra
//     command's writers.
//   - Names (graph, branch, table, tag), commit ids and operation ids are
//     checked locally before anything is contacted, with the same rules the
//     workflows apply, so a typo is exit 2 at once rather than after a round
//     trip.
package main
