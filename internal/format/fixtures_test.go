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
	versionB    = ulid.MustParse("01J000000000000000000VERB2")
	objectA     = ulid.MustParse("01J0000000000000000000BJA1")
	objectB     = ulid.MustParse("01J0000000000000000000BJB2")
	sampleTime  = time.Date(2025, 3, 4, 5, 6, 7, 890000000, time.UTC)
	sampleSHA   = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	sampleHash  = HashOf([]byte("a chunk"))
	otherHash   = HashOf([]byte("another chunk"))
)

func sampleGraph() Graph {
	return Graph{Name: "sales", CreatedAt: sampleTime, Op: "op-init-1", DefaultBranch: "main"}
}

// sampleCommit is a merge commit on feature: seq 3, merged parent from main,
// inline pins and lineage.
func sampleCommit() Commit {
	return Commit{
		ID:           CommitID{Tree: treeFeature, Seq: 3},
		Branch:       "feature/x",
		Parents:      []CommitID{{Tree: treeFeature, Seq: 2, Digest: Digest{0xaa, 1}}, {Tree: treeMain, Seq: 7, Digest: Digest{0xbb, 2}}},
		Fork:         CommitID{Tree: treeMain, Seq: 4, Digest: Digest{0xcc, 3}},
		Pins:         MapRef[PinEntry]{Entries: []PinEntry{{Table: "customers", Version: versionA}, {Table: "orders", Version: versionB}}},
		RestoredFrom: CommitID{Tree: treeOther, Seq: 1, Digest: Digest{0xee, 5}},
		Lineage:      MapRef[LineageEntry]{Entries: sampleLineage()},
		Author:       "ana@example.com",
		Message:      "merge main\n\nwith <details> & more",
		Time:         sampleTime,
		Op:           "op-merge-9",
	}
}

func sampleLineage() []LineageEntry {
	return []LineageEntry{{Tree: treeOther, Seq: 4, Digest: Digest{0xff, 6}}, {Tree: treeMain, Seq: 7, Digest: Digest{0xbb, 2}}}
}

func sampleRootCommit() Commit {
	return Commit{
		ID:      CommitID{Tree: treeMain, Seq: 0},
		Branch:  "main",
		Pins:    MapRef[PinEntry]{Entries: []PinEntry{}},
		Lineage: MapRef[LineageEntry]{Entries: []LineageEntry{}},
		Author:  "graft",
		Message: "initialize graph sales",
		Time:    sampleTime,
		Op:      "op-init-1",
	}
}

// sampleChunkedCommit pins and knows its lineage through chunks.
func sampleChunkedCommit() Commit {
	return Commit{
		ID:      CommitID{Tree: treeMain, Seq: 12},
		Branch:  "main",
		Parents: []CommitID{{Tree: treeMain, Seq: 11, Digest: Digest{0x11, 7}}},
		Pins:    MapRef[PinEntry]{Root: sampleHash, Count: 10000},
		Lineage: MapRef[LineageEntry]{Root: otherHash, Count: 2500},
		Author:  "graft",
		Message: "write table t42",
		Time:    sampleTime,
		Op:      "op-write-12",
	}
}

func sampleLiveRef() BranchRef {
	return BranchRef{State: RefLive, Branch: "feature/x", Native: NativeName("feature/x", treeFeature), Tree: treeFeature,
		Head: CommitID{Tree: treeFeature, Seq: 3, Digest: Digest{0xdd, 4}}, Op: "op-create-2"}
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
	return Tag{State: TagLive, Name: "release/v1", Commit: CommitID{Tree: treeMain, Seq: 7, Digest: Digest{0xbb, 2}}, Op: "op-tag-5", CreatedAt: sampleTime}
}

func sampleEntries() []ManifestEntry {
	return []ManifestEntry{
		{Name: "01J0000000000000000000BJA1", Object: objectA, Size: 0, SHA256: sampleSHA},
		{Name: "part-00001.parquet", Object: objectB, Size: 1234, SHA256: sampleSHA},
		{Name: "raw/2025/03/04/events.parquet", External: "landing/events/2025-03-04.parquet", Size: 99, ETag: `"9a0364b9e99bb480dd25e1f0284c8555"`},
	}
}

func sampleTableVersion() TableVersion {
	return TableVersion{
		Table:     "orders",
		ID:        versionA,
		Entries:   MapRef[ManifestEntry]{Entries: sampleEntries()},
		Bytes:     1333,
		CreatedAt: sampleTime,
		Op:        "op-write-1",
	}
}

func sampleChunkedTableVersion() TableVersion {
	return TableVersion{
		Table:     "events",
		ID:        versionB,
		Entries:   MapRef[ManifestEntry]{Root: sampleHash, Count: 1000000},
		Bytes:     137438953472000,
		CreatedAt: sampleTime,
		Op:        "op-write-2",
		Base:      versionA,
		Added:     100,
		Removed:   2,
		Replaced:  0,
	}
}

func sampleManifestNode() MapNode {
	return MapNode{Level: 1, Children: []ChildRef{
		{Last: "part-00127.parquet", Count: 127, Chunk: sampleHash},
		{Last: "part-00300.parquet", Count: 173, Chunk: otherHash},
	}}
}

// sampleUpload is an upload record as first written, before its upload exists;
// sampleStartedUpload the same record once the upload is created.
func sampleUpload() Upload {
	return Upload{ObjectKey: ObjectKey("sales", "orders", objectB), CreatedAt: sampleTime}
}

func sampleStartedUpload() Upload {
	u := sampleUpload()
	u.UploadID = "2~kq3Yw_rZ9vJx0uLd-Ve5hG7sTnYb1mPQ"
	return u
}

// mustEncode returns a function that passes through encoded bytes and fails
// t on an encode error: mustEncode(t)(EncodeTag(tg)).
func mustEncode(t *testing.T) func([]byte, error) []byte {
	return func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		return b
	}
}

// sampleCountedPins is a pins leaf whose second entry carries the counts of its
// change from another version.
func sampleCountedPins() []PinEntry {
	return []PinEntry{{Table: "customers", Version: versionA}, PinEntry{Table: "orders", Version: versionB}.Change(versionA, 3, 1, 2)}
}
