package format

import "github.com/oklog/ulid/v2"

var (
	versionB   = ulid.MustParse("01J000000000000000000VERB2")
	sampleHash = HashOf([]byte("a chunk"))
	otherHash  = HashOf([]byte("another chunk"))
)

// sampleCommitV2 is a format-2 merge commit on feature: seq 3, merged parent
// from main, inline pins and lineage.
func sampleCommitV2() CommitV2 {
	return CommitV2{
		ID:           CommitID{Tree: treeFeature, Seq: 3},
		Branch:       "feature/x",
		Parents:      []CommitID{{Tree: treeFeature, Seq: 2, Digest: Digest{0xaa, 1}}, {Tree: treeMain, Seq: 7, Digest: Digest{0xbb, 2}}},
		Fork:         CommitID{Tree: treeMain, Seq: 4, Digest: Digest{0xcc, 3}},
		Pins:         MapRef[PinEntry]{Entries: []PinEntry{{Table: "customers", Version: versionA}, {Table: "orders", Version: versionB}}},
		RestoredFrom: CommitID{Tree: treeOther, Seq: 1},
		Lineage:      MapRef[LineageEntry]{Entries: []LineageEntry{{Tree: treeOther, Seq: 4}, {Tree: treeMain, Seq: 7, Digest: Digest{0xbb, 2}}}},
		Author:       "ana@example.com",
		Message:      "merge main\n\nwith <details> & more",
		Time:         sampleTime,
		Op:           "op-merge-9",
	}
}

func sampleRootCommitV2() CommitV2 {
	return CommitV2{
		ID:      CommitID{Tree: treeMain, Seq: 0},
		Branch:  "main",
		Author:  "graft",
		Message: "initialize graph sales",
		Time:    sampleTime,
		Op:      "op-init-1",
	}
}

// sampleChunkedCommitV2 pins and knows its lineage through chunks.
func sampleChunkedCommitV2() CommitV2 {
	return CommitV2{
		ID:      CommitID{Tree: treeMain, Seq: 12},
		Branch:  "main",
		Parents: []CommitID{{Tree: treeMain, Seq: 11}},
		Pins:    MapRef[PinEntry]{Root: sampleHash, Count: 10000},
		Lineage: MapRef[LineageEntry]{Root: otherHash, Count: 2500},
		Author:  "graft",
		Message: "write table t42",
		Time:    sampleTime,
		Op:      "op-write-12",
	}
}

func sampleLiveRefV2() BranchRef {
	r := sampleLiveRef()
	r.Head = CommitID{Tree: treeFeature, Seq: 3, Digest: Digest{0xdd, 4}}
	return r
}

func sampleRetiredRefV2() BranchRef {
	r := sampleLiveRefV2()
	r.State, r.RetiredOp = RefRetired, "op-delete-3"
	return r
}

func sampleGraphV2() Graph {
	g := sampleGraph()
	g.UpgradeOp = "op-upgrade-1"
	return g
}

func sampleTagV2() Tag {
	t := sampleTag()
	t.Commit = CommitID{Tree: treeMain, Seq: 7, Digest: Digest{0xbb, 2}}
	return t
}

func sampleEntries() []ManifestEntry {
	return []ManifestEntry{
		{Name: "01J0000000000000000000BJA1", Object: objectA, Size: 0, SHA256: sampleSHA},
		{Name: "part-00001.parquet", Object: objectB, Size: 1234, SHA256: sampleSHA},
		{Name: "raw/2025/03/04/events.parquet", External: "landing/events/2025-03-04.parquet", Size: 99, ETag: `"9a0364b9e99bb480dd25e1f0284c8555"`},
	}
}

func sampleTableVersionV2() TableVersionV2 {
	return TableVersionV2{
		Table:     "orders",
		ID:        versionA,
		Entries:   MapRef[ManifestEntry]{Entries: sampleEntries()},
		Bytes:     1333,
		CreatedAt: sampleTime,
		Op:        "op-write-1",
	}
}

func sampleChunkedTableVersionV2() TableVersionV2 {
	return TableVersionV2{
		Table:     "events",
		ID:        versionB,
		Entries:   MapRef[ManifestEntry]{Root: sampleHash, Count: 1000000},
		Bytes:     137438953472000,
		CreatedAt: sampleTime,
		Op:        "op-write-2",
	}
}

func sampleManifestNode() MapNode {
	return MapNode{Level: 1, Children: []ChildRef{
		{Last: "part-00127.parquet", Count: 127, Chunk: sampleHash},
		{Last: "part-00300.parquet", Count: 173, Chunk: otherHash},
	}}
}
