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
//     TestHeadDiscovery_SameRequestsAtDepth0And64 (format 1) and
//     TestHeadReadV2_SameRequestsAtEveryDepth (format 2) are the guarantee,
//     run in the ordinary test suite on both backends, and they check the
//     counts below.
//   - The engine benchmarks and the flatness tests (createbranch_test.go,
//     ops_bench_test.go, merge_bench_test.go, flat_test.go) run on format-2
//     graphs, what new graphs are; their request and ledger constants are
//     format 2's.
package bench

// Request counts the data plane (internal/graph) promises for finding a
// branch's head, which this package's tests assert on every backend at
// history depth 0 and 64.
const (
	// ReadHeadLists and ReadHeadGets are the cost of graph.ReadHead: one LIST
	// with Limit 1 of the tree's commits (the newest key sorts first) and one
	// GET of that commit.
	ReadHeadLists, ReadHeadGets = 1, 1
	// HeadDiscoveryLists and HeadDiscoveryGets are the cost of finding a
	// branch's head from its logical name, graph.ResolveBranch then
	// graph.ReadHead, for a branch with one incarnation: ResolveBranch lists
	// the name's refs (one LIST) and GETs the one ref, then ReadHead.
	HeadDiscoveryLists, HeadDiscoveryGets = 1 + ReadHeadLists, 1 + ReadHeadGets
)

// Request counts of finding a branch's head in format 2 (docs/format.md,
// "Read costs"), where a live ref names its tree's head and nothing is
// listed to find it. The tests assert them at depth 0, 64 and 10,000.
const (
	// ReadHeadV2Gets is the cost of reading the head of a known incarnation
	// (graph.Graph.RefHead): one GET of its ref and one GET of the commit
	// the ref names. No LIST.
	ReadHeadV2Gets = 2
	// HeadDiscoveryV2Lists and HeadDiscoveryV2Gets are the cost of finding
	// it from the logical name (graph.Graph.BranchHead) for a branch with
	// one incarnation: ResolveBranch lists the name's refs (one LIST) and
	// GETs the one ref, then one GET of the commit the ref names.
	HeadDiscoveryV2Lists, HeadDiscoveryV2Gets = 1, 2
)
