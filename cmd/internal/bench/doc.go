// Package bench measures graft's storage costs: the latency and the number of
// object-store requests of put-if-absent, compare-and-swap and head discovery,
// on the local directory store and on a real S3 server (versitygw). The
// benchmarks live in this package's _test.go files; docs/benchmarks.md says
// how to run them and records a run.
//
// Invariants:
//
//   - Every store a benchmark or test uses is wrapped in faults.Wrap with no
//     rules, so the request counts reported are the requests the store
//     received, counted by the same wrapper on every backend.
//   - Head discovery costs a fixed number of requests whatever the history
//     length (docs/format.md). The benchmarks only report the figures;
//     TestHeadRead_SameRequestsAtEveryDepth is the guarantee, run in the
//     ordinary test suite on both backends, and it checks the request counts
//     head_test.go names.
package bench
