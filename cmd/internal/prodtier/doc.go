// Package prodtier is graft's production-shape test tier: graft on the
// Temporal server users deploy, not on the CLI's dev server. Its tests start
// the pinned Temporal server (tools.TemporalServer, the version
// docker-compose.yml runs, configured from the same template and environment
// as the compose file's temporal service) with Postgres persistence and SQL
// visibility in databases of their own on the local Postgres, versitygw as
// the store, and three graft-worker processes — the built binary, configured
// by environment as the compose file's worker service is — on one task queue.
//
// What the tier proves (docs/operations.md, "What the production-shape tier
// proves"):
//   - creates, table writes, merges, a cleanup started by a Temporal
//     Schedule, and visibility queries on GraftGraph, GraftOperation and
//     GraftOutcome behave on the server as on the dev server;
//   - a rolling restart (SIGTERM to each worker in turn while operations
//     run) loses nothing and every operation ends definitively;
//   - kill -9 of the worker running a create that is settling an in-doubt
//     ref put: another worker finishes the create;
//   - a restart of the Temporal server mid-run (its state in Postgres):
//     running operations, and a settle waiting on a durable timer, resume.
//
// After each scenario the ledger and the store are checked against each
// other (invariants_test.go).
//
// Storage faults reach the worker processes through the one hook a
// production worker has, its S3 endpoint: each worker talks to versitygw
// through a small HTTP front in the test process that can answer a branch
// ref's PUT with 503 without forwarding it (an ambiguous write, as a
// network or gateway failure would be). The graft-worker binary itself is
// the one users run.
//
// BenchmarkProdCreates measures creates per second at one, two and three
// workers on this server (docs/benchmarks.md).
package prodtier
