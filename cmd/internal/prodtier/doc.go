// Package prodtier is graft's production-shape test tier: graft on the
// Temporal server users deploy (tools.TemporalServer, configured as
// docker-compose.yml's temporal service, on Postgres), versitygw as the store
// and three graft-worker processes, the built binary configured as the
// compose file's worker service, on one task queue. Storage faults reach the
// workers only through their S3 endpoint: a small HTTP front in the test
// process can answer a ref's PUT with 503 without forwarding it. What its
// scenarios show is in docs/testing.md ("The production-shape tier");
// BenchmarkProdCreates is in docs/benchmarks.md.
package prodtier
