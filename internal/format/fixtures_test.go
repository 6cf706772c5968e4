package format

import (
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// Fixed identifiers and times, so every sample's bytes are reproducible.
var (
	treeMain    = ulid.MustParse("01J0000000000000000000MA1N")
	treeFeature = ulid.MustParse("01J0000000000000000000FEAT")
	treeOther   = ulid.MustParse("01J00000000000000000000THR")
	versionA    = ulid.MustParse("01J000000000000000000VERA1")
	objectA     = ulid.MustParse("01J0000000000000000000BJA1")
	objectB     = ulid.MustParse("01J0000000000000000000BJB2")
	sampleTime  = time.Date(2025, 3, 4, 5, 6, 7, 890000000, time.UTC)
	sampleSHA   = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

func sampleGraph() Graph {
	return Graph{Name: "sales", CreatedAt: sampleTime, Op: "op-init-1", DefaultBranch: "main"}
}

func sampleTableVersion() TableVersion {
	return TableVersion{
		Table: "orders",
		ID:    versionA,
		Objects: []ObjectEntry{
			{ID: objectA, Size: 0, SHA256: sampleSHA},
			{ID: objectB, Size: 1234, SHA256: sampleSHA},
		},
		CreatedAt: sampleTime,
		Op:        "op-write-1",
	}
}

// sampleCommit is a merge commit on feature: seq 3, merged parent from main.
func sampleCommit() Commit {
	return Commit{
		ID:           CommitID{Tree: treeFeature, Seq: 3},
		Branch:       "feature/x",
		Parents:      []CommitID{{Tree: treeFeature, Seq: 2}, {Tree: treeMain, Seq: 7}},
		Pins:         map[string]ulid.ULID{"orders": versionA, "customers": versionA},
		RestoredFrom: CommitID{Tree: treeOther, Seq: 1},
		Lineage:      map[ulid.ULID]int64{treeMain: 7, treeOther: 4},
		Author:       "ana@example.com",
		Message:      "merge main\n\nwith <details> & more",
		Time:         sampleTime,
		Op:           "op-merge-9",
	}
}

func sampleRootCommit() Commit {
	return Commit{
		ID:      CommitID{Tree: treeMain, Seq: 0},
		Branch:  "main",
		Pins:    map[string]ulid.ULID{},
		Lineage: map[ulid.ULID]int64{},
		Author:  "graft",
		Message: "initialize graph sales",
		Time:    sampleTime,
		Op:      "op-init-1",
	}
}

func sampleLiveRef() BranchRef {
	return BranchRef{State: RefLive, Branch: "feature/x", Native: NativeName("feature/x", treeFeature), Tree: treeFeature, Op: "op-create-2"}
}

func sampleRetiredRef() BranchRef {
	r := sampleLiveRef()
	r.State, r.RetiredOp = RefRetired, "op-delete-3"
	return r
}

func sampleFence() BranchRef {
	return BranchRef{State: RefFence, Native: NativeName("feature/x", treeFeature), Op: "op-cleanup-4", Reason: "cleanup"}
}

func sampleTag() Tag {
	return Tag{State: TagLive, Name: "release/v1", Commit: CommitID{Tree: treeMain, Seq: 7}, Op: "op-tag-5", CreatedAt: sampleTime}
}

// mustEncode returns a function that passes through encoded bytes and fails
// t on an encode error: mustEncode(t)(EncodeCommit(c)).
func mustEncode(t *testing.T) func([]byte, error) []byte {
	return func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		return b
	}
}
