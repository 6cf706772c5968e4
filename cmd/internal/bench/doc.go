// Package bench measures graft's storage costs: the latency and the number of
// object-store requests of put-if-absent, compare-and-swap and head discovery,
// on the local directory store and on a real S3 server (versitygw). The
// benchmarks live in this package's _test.go files; docs/benchmarks.md says
// how to run them and records a run.
//
// Every store a benchmark or test uses is wrapped in faults.Wrap with no
// rules, so the request counts are those the store received, counted alike on
// every backend. Head discovery costs a fixed number of requests whatever the
// history length (docs/format.md): TestHeadRead_SameRequestsAtEveryDepth
// checks it on both backends in the ordinary test suite.
package bench
