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
//     ordinary test suite on both backends, and it checks the counts below.
package bench

// Request counts of finding a branch's head (docs/format.md, "Read costs"),
// where a live ref names its tree's head and nothing is
// listed to find it. The tests assert them at depth 0, 64 and 10,000.
const (
	// ReadHeadGets is the cost of reading the head of a known incarnation
	// (graph.Graph.RefHead): one GET of its ref and one GET of the commit
	// the ref names. No LIST.
	ReadHeadGets = 2
	// HeadDiscoveryLists and HeadDiscoveryGets are the cost of finding
	// it from the logical name (graph.Graph.BranchHead) for a branch with
	// one incarnation: ResolveBranch lists the name's refs (one LIST) and
	// GETs the one ref, then one GET of the commit the ref names.
	HeadDiscoveryLists, HeadDiscoveryGets = 1, 2
)
