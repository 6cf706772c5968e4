package format

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func sealed(c CommitV2) func() ([]byte, error) {
	return func() ([]byte, error) {
		_, b, err := SealCommit(c)
		return b, err
	}
}

func codecsV2() []codec {
	return []codec{
		{"v2_commit", sealed(sampleCommitV2()), func(b []byte) (any, error) { return DecodeCommitV2(b) }},
		{"v2_commit_root", sealed(sampleRootCommitV2()), func(b []byte) (any, error) { return DecodeCommitV2(b) }},
		{"v2_commit_chunked", sealed(sampleChunkedCommitV2()), func(b []byte) (any, error) { return DecodeCommitV2(b) }},
		{"v2_branch_ref_live", func() ([]byte, error) { return EncodeBranchRefV2(sampleLiveRefV2()) }, func(b []byte) (any, error) { return DecodeBranchRefV2(b) }},
		{"v2_branch_ref_retired", func() ([]byte, error) { return EncodeBranchRefV2(sampleRetiredRefV2()) }, func(b []byte) (any, error) { return DecodeBranchRefV2(b) }},
		{"v2_branch_ref_fence", func() ([]byte, error) { return EncodeBranchRefV2(sampleFence()) }, func(b []byte) (any, error) { return DecodeBranchRefV2(b) }},
		{"v2_graph", func() ([]byte, error) { return EncodeGraphV2(sampleGraphV2()) }, func(b []byte) (any, error) { return DecodeGraphV2(b) }},
		{"v2_tag", func() ([]byte, error) { return EncodeTagV2(sampleTagV2()) }, func(b []byte) (any, error) { return DecodeTagV2(b) }},
		{"v2_table_version", func() ([]byte, error) { return EncodeTableVersionV2(sampleTableVersionV2()) }, func(b []byte) (any, error) { return DecodeTableVersionV2(b) }},
		{"v2_table_version_chunked", func() ([]byte, error) { return EncodeTableVersionV2(sampleChunkedTableVersionV2()) }, func(b []byte) (any, error) { return DecodeTableVersionV2(b) }},
		{"v2_manifest_leaf", func() ([]byte, error) { return ManifestMap.EncodeLeaf(sampleEntries()) }, func(b []byte) (any, error) { return ManifestMap.DecodeLeaf(b) }},
		{"v2_pins_leaf", func() ([]byte, error) { return PinsMap.EncodeLeaf(sampleCommitV2().Pins.Entries) }, func(b []byte) (any, error) { return PinsMap.DecodeLeaf(b) }},
		{"v2_lineage_leaf", func() ([]byte, error) {
			return LineageMap.EncodeLeaf([]LineageEntry{{Tree: treeOther, Seq: 4}, {Tree: treeMain, Seq: 7, Digest: Digest{0xbb, 2}}})
		}, func(b []byte) (any, error) { return LineageMap.DecodeLeaf(b) }},
		{"v2_manifest_node", func() ([]byte, error) { return ManifestMap.EncodeNode(sampleManifestNode()) }, func(b []byte) (any, error) { return ManifestMap.DecodeNode(b) }},
	}
}

// The format-2 golden files are the format too.
func TestEncodeV2_MatchesGoldenBytes_AndDecodeInverts(t *testing.T) {
	for _, c := range codecsV2() {
		t.Run(c.name, func(t *testing.T) {
			got := mustEncode(t)(c.encode())
			path := filepath.Join("testdata", "golden", c.name+".json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding changed:\n got %s\nwant %s", got, want)
			}
			if again := mustEncode(t)(c.encode()); !bytes.Equal(again, got) {
				t.Fatalf("two encodings differ")
			}
			if len(got) > MaxObjectSize {
				t.Fatalf("%d bytes, over %d", len(got), MaxObjectSize)
			}
			v, err := c.decode(got)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			// Decoding a format-2 object as format 1 reports its version.
			var ue *UnsupportedFormatError
			if _, err := DecodeCommit(got); strings.HasPrefix(c.name, "v2_commit") && (!errors.As(err, &ue) || ue.Version != 2) {
				t.Fatalf("format-1 decoder on a format-2 commit: %v", err)
			}
			_ = v
		})
	}
}

func TestSealCommit_DigestNamesTheContent(t *testing.T) {
	c, b, err := SealCommit(sampleCommitV2())
	if err != nil {
		t.Fatal(err)
	}
	if !c.ID.IsV2() || !strings.Contains(string(b), `"id":"`+c.ID.String()+`"`) {
		t.Fatalf("sealed id %s not in %s", c.ID, b)
	}
	got, err := DecodeCommitV2(b)
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("decode = %+v, %v; want %+v", got, err, c)
	}
	// Any change of content changes the id.
	other := sampleCommitV2()
	other.Message += "!"
	c2, _, err := SealCommit(other)
	if err != nil || c2.ID == c.ID || c2.ID.Tree != c.ID.Tree || c2.ID.Seq != c.ID.Seq {
		t.Fatalf("changed commit sealed to %v (was %v), %v", c2.ID, c.ID, err)
	}
	// A stored commit whose content does not match its digest is refused, so
	// an id can never name two byte strings.
	forged := bytes.Replace(b, []byte("merge main"), []byte("merge mainX"), 1)
	if _, err := DecodeCommitV2(forged); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("forged commit: %v", err)
	}
	// And so is a non-canonical spelling of the same content.
	spaced := bytes.Replace(b, []byte(`"seq":3`), []byte(`"seq": 3`), 1)
	if _, err := DecodeCommitV2(spaced); !errors.Is(err, ErrMalformed) {
		t.Fatalf("non-canonical commit: %v", err)
	}
	// Sealing ignores a digest it is given.
	stale := sampleCommitV2()
	stale.ID.Digest = Digest{9}
	if c3, _, _ := SealCommit(stale); c3.ID != c.ID {
		t.Fatalf("sealing with a stale digest gave %v, want %v", c3.ID, c.ID)
	}
}

func TestDecodeV2_RejectsEachViolation_WithTypedError(t *testing.T) {
	_, commitBytes, _ := SealCommit(sampleCommitV2())
	golden := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", "golden", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ref := func(b string) error { _, err := DecodeBranchRefV2([]byte(b)); return err }
	version := func(b string) error { _, err := DecodeTableVersionV2([]byte(b)); return err }
	leaf := func(b string) error { _, err := ManifestMap.DecodeLeaf([]byte(b)); return err }
	node := func(b string) error { _, err := ManifestMap.DecodeNode([]byte(b)); return err }
	commit := func(b string) error { _, err := DecodeCommitV2([]byte(b)); return err }
	graph := func(b string) error { _, err := DecodeGraphV2([]byte(b)); return err }
	tag := func(b string) error { _, err := DecodeTagV2([]byte(b)); return err }
	cases := []struct {
		name     string
		decode   func(string) error
		in       string
		old, new string
		want     error
		detail   string
	}{
		{"live ref without head", ref, golden("v2_branch_ref_live"), `,"head":"01J0000000000000000000FEAT-3-dd040000000000000000000000000000"`, ``, ErrMalformed, `"head": required`},
		{"fence with head", ref, golden("v2_branch_ref_fence"), `"op":`, `"head":"01J0000000000000000000FEAT-3-dd040000000000000000000000000000","op":`, ErrMalformed, "set on a fence"},
		{"head in another tree", ref, golden("v2_branch_ref_live"), `"head":"01J0000000000000000000FEAT-3`, `"head":"01J0000000000000000000MA1N-3`, ErrMalformed, "not a commit of the ref's tree"},
		{"format 1 ref", ref, golden("branch_ref_live"), ``, ``, ErrUnsupportedFormat, "version 1"},
		{"unknown field", ref, golden("v2_branch_ref_live"), `"op":`, `"extra":1,"op":`, ErrMalformed, "unknown field"},
		{"bytes not the sum", version, golden("v2_table_version"), `"bytes":1333`, `"bytes":1334`, ErrMalformed, "not the total size"},
		{"entry with both object and external", version, golden("v2_table_version"), `"external":"landing`, `"object":"01J0000000000000000000BJA1","external":"landing`, ErrMalformed, "exactly one of object and external"},
		{"external without etag", version, golden("v2_table_version"), `,"etag":"\"9a0364b9e99bb480dd25e1f0284c8555\""`, ``, ErrMalformed, "required for an external object"},
		{"entry name dot segment", leaf, golden("v2_manifest_leaf"), `"raw/2025/03/04/events.parquet"`, `"raw/../events.parquet"`, ErrMalformed, `".."`},
		{"entries unsorted", leaf, golden("v2_manifest_leaf"), `"part-00001.parquet"`, `"000-first"`, ErrMalformed, "strictly ascending"},
		{"empty leaf", leaf, `{"format":2,"kind":"map_leaf","map":"manifest","entries":[]}`, ``, ``, ErrMalformed, "at least one entry"},
		{"wrong map kind", leaf, golden("v2_pins_leaf"), ``, ``, ErrMalformed, `is "pins", want "manifest"`},
		{"entry extra field", leaf, golden("v2_manifest_leaf"), `"size":0,`, `"size":0,"Size":0,`, ErrMalformed, "unknown field"},
		{"node level 0", node, golden("v2_manifest_node"), `"level":1`, `"level":0`, ErrMalformed, "level"},
		{"node children unsorted", node, golden("v2_manifest_node"), `"part-00300.parquet"`, `"part-00001.parquet"`, ErrMalformed, "strictly ascending"},
		{"node child count 0", node, golden("v2_manifest_node"), `"count":127`, `"count":0`, ErrMalformed, "less than 1"},
		{"node chunk hash upper case", node, golden("v2_manifest_node"), sampleHash.String(), strings.ToUpper(sampleHash.String()), ErrInvalidName, "lower-case hex"},
		{"commit id without digest", commit, string(commitBytes), `"id":"01J0000000000000000000FEAT-3-`, `"id":"01J0000000000000000000FEAT-3","x":"`, ErrMalformed, ""},
		{"inline lineage holds own tree", commit, golden("v2_commit"), `{"tree":"01J00000000000000000000THR","seq":4}`, `{"tree":"01J0000000000000000000FEAT","seq":4}`, ErrMalformed, ""},
		{"chunked map count 0", commit, golden("v2_commit_chunked"), `"count":10000`, `"count":0`, ErrMalformed, "at least one entry"},
		{"pins both forms", commit, golden("v2_commit_chunked"), `"pins":{"root"`, `"pins":{"entries":[],"root"`, ErrMalformed, "unknown field"},
		{"graph bad upgrade op", graph, golden("v2_graph"), `"upgrade_op":"op-upgrade-1"`, `"upgrade_op":"op upgrade"`, ErrMalformed, "upgrade_op"},
		{"format-1 tag as format 2", tag, golden("tag"), ``, ``, ErrUnsupportedFormat, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := c.in
			if c.old != "" {
				if !strings.Contains(in, c.old) {
					t.Fatalf("input does not contain %q", c.old)
				}
				in = strings.Replace(in, c.old, c.new, 1)
			}
			err := c.decode(in)
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v does not match %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.detail) {
				t.Fatalf("error %q does not mention %q", err, c.detail)
			}
		})
	}
}

func TestDecodeAny_ReadsBothFormats(t *testing.T) {
	for _, c := range []struct {
		b    []byte
		want int
	}{
		{mustEncode(t)(EncodeBranchRef(sampleLiveRef())), 1},
		{mustEncode(t)(EncodeBranchRefV2(sampleLiveRefV2())), 2},
	} {
		if _, v, err := DecodeBranchRefAny(c.b); err != nil || v != c.want {
			t.Fatalf("DecodeBranchRefAny = v%d, %v; want v%d", v, err, c.want)
		}
	}
	if _, v, err := DecodeGraphAny(mustEncode(t)(EncodeGraphV2(sampleGraphV2()))); err != nil || v != 2 {
		t.Fatalf("DecodeGraphAny = %d, %v", v, err)
	}
	if _, v, err := DecodeTagAny(mustEncode(t)(EncodeTag(sampleTag()))); err != nil || v != 1 {
		t.Fatalf("DecodeTagAny = %d, %v", v, err)
	}
	// A format-1 encoder refuses what only format 2 can say.
	if _, err := EncodeBranchRef(sampleLiveRefV2()); !errors.Is(err, ErrMalformed) {
		t.Fatalf("format-1 ref with a head: %v", err)
	}
	if _, err := EncodeTag(sampleTagV2()); !errors.Is(err, ErrMalformed) {
		t.Fatalf("format-1 tag of a format-2 commit: %v", err)
	}
	if _, err := EncodeGraph(sampleGraphV2()); !errors.Is(err, ErrMalformed) {
		t.Fatalf("format-1 graph with an upgrade op: %v", err)
	}
}

// The boundary rule is part of the format: these keys split where they split.
func TestBoundaryAfter_IsFixed(t *testing.T) {
	var hits []string
	for i := 0; i < 2000; i++ {
		k := "part-" + itoa3(i)
		if BoundaryAfter(0, k) {
			hits = append(hits, k)
		}
	}
	want := goldenBoundaries(t)
	if strings.Join(hits, ",") != want {
		t.Fatalf("boundaries moved:\n got %s\nwant %s", strings.Join(hits, ","), want)
	}
	if n := len(hits); n < 5 || n > 40 {
		t.Fatalf("%d boundaries in 2000 keys, want about %d", n, 2000/MapBoundaryModulus)
	}
	if BoundaryAfter(0, "part-0007") == BoundaryAfter(1, "part-0007") && BoundaryAfter(0, "x") == BoundaryAfter(1, "x") &&
		BoundaryAfter(0, hits[0]) == BoundaryAfter(1, hits[0]) && BoundaryAfter(0, hits[1]) == BoundaryAfter(1, hits[1]) {
		t.Fatalf("levels do not change the boundary hash")
	}
}

func goldenBoundaries(t *testing.T) string {
	t.Helper()
	path := filepath.Join("testdata", "golden", "v2_boundaries.txt")
	if *update {
		var hits []string
		for i := 0; i < 2000; i++ {
			if k := "part-" + itoa3(i); BoundaryAfter(0, k) {
				hits = append(hits, k)
			}
		}
		os.WriteFile(path, []byte(strings.Join(hits, ",")), 0o644)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every chunk holds at least one worst-case entry, and a node two
// worst-case children, so the chunker can always make progress.
func TestWorstCaseEntries_FitInAChunk(t *testing.T) {
	long := strings.Repeat("<", MaxEntryNameLen)
	e := ManifestEntry{Name: long, External: long, Size: MaxEntrySize, SHA256: sampleSHA, ETag: strings.Repeat("&", MaxETagLen)}
	b, err := ManifestMap.EncodeLeaf([]ManifestEntry{e})
	if err != nil || len(b) > MaxObjectSize/4 {
		t.Fatalf("worst-case leaf: %d bytes, %v", len(b), err)
	}
	one := ChildRef{Last: long, Count: 1 << 62, Chunk: sampleHash}
	if n := ManifestMap.NodeOverhead(MaxMapLevel) + 2*ManifestMap.ChildSize(one) + 1; n > MaxObjectSize {
		t.Fatalf("two worst-case children take %d bytes", n)
	}
	entry, _ := ManifestMap.EncodeEntry(e)
	if got := ManifestMap.LeafOverhead() + len(entry); got != len(b) {
		t.Fatalf("LeafOverhead + entry = %d, leaf is %d", got, len(b))
	}
}

func TestInlineFits_ByCountAndBytes(t *testing.T) {
	var pins []PinEntry
	for i := 0; i < MapInlineMaxEntries+1; i++ {
		pins = append(pins, PinEntry{Table: "t" + itoa3(i), Version: versionA})
	}
	if !PinsMap.InlineFits(pins[:MapInlineMaxEntries]) || PinsMap.InlineFits(pins) {
		t.Fatalf("inline by count: %d fits, %d does not", MapInlineMaxEntries, MapInlineMaxEntries+1)
	}
	big := []ManifestEntry{{Name: strings.Repeat("n", 1000), Object: objectA, SHA256: sampleSHA}}
	for i := 1; i < 9; i++ {
		e := big[0]
		e.Name = strings.Repeat("n", 1000) + itoa3(i)
		big = append(big, e)
	}
	if ManifestMap.InlineFits(big) {
		t.Fatalf("%d entries of 1 KB fit inline", len(big))
	}
	v := sampleTableVersionV2()
	v.Entries.Entries = big
	if _, err := EncodeTableVersionV2(v); !errors.Is(err, ErrMalformed) {
		t.Fatalf("oversize inline manifest: %v", err)
	}
}
