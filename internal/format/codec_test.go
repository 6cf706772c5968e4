package format

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current encoder")

// codec ties one sample value to its encoder and decoder.
type codec struct {
	name   string
	value  any
	encode func() ([]byte, error)
	decode func([]byte) (any, error)
}

func sealed(c Commit) func() ([]byte, error) {
	return func() ([]byte, error) {
		_, b, err := SealCommit(c)
		return b, err
	}
}

// sealedValue is c with the id SealCommit gives it: what decoding its bytes returns.
func sealedValue(c Commit) Commit {
	s, _, err := SealCommit(c)
	if err != nil {
		panic(err)
	}
	return s
}

func codecs() []codec {
	decodeCommit := func(b []byte) (any, error) { return DecodeCommit(b) }
	decodeRef := func(b []byte) (any, error) { return DecodeBranchRef(b) }
	decodeVersion := func(b []byte) (any, error) { return DecodeTableVersion(b) }
	decodeUpload := func(b []byte) (any, error) { return DecodeUpload(b) }
	return []codec{
		{"graph", sampleGraph(), func() ([]byte, error) { return EncodeGraph(sampleGraph()) }, func(b []byte) (any, error) { return DecodeGraph(b) }},
		{"commit", sealedValue(sampleCommit()), sealed(sampleCommit()), decodeCommit},
		{"commit_root", sealedValue(sampleRootCommit()), sealed(sampleRootCommit()), decodeCommit},
		{"commit_chunked", sealedValue(sampleChunkedCommit()), sealed(sampleChunkedCommit()), decodeCommit},
		{"branch_ref_live", sampleLiveRef(), func() ([]byte, error) { return EncodeBranchRef(sampleLiveRef()) }, decodeRef},
		{"branch_ref_retired", sampleRetiredRef(), func() ([]byte, error) { return EncodeBranchRef(sampleRetiredRef()) }, decodeRef},
		{"branch_ref_fence", sampleFence(), func() ([]byte, error) { return EncodeBranchRef(sampleFence()) }, decodeRef},
		{"tag", sampleTag(), func() ([]byte, error) { return EncodeTag(sampleTag()) }, func(b []byte) (any, error) { return DecodeTag(b) }},
		{"table_version", sampleTableVersion(), func() ([]byte, error) { return EncodeTableVersion(sampleTableVersion()) }, decodeVersion},
		{"table_version_chunked", sampleChunkedTableVersion(), func() ([]byte, error) { return EncodeTableVersion(sampleChunkedTableVersion()) }, decodeVersion},
		{"manifest_leaf", sampleEntries(), func() ([]byte, error) { return ManifestMap.EncodeLeaf(sampleEntries()) }, func(b []byte) (any, error) { return ManifestMap.DecodeLeaf(b) }},
		{"pins_leaf_counted", sampleCountedPins(), func() ([]byte, error) { return PinsMap.EncodeLeaf(sampleCountedPins()) }, func(b []byte) (any, error) { return PinsMap.DecodeLeaf(b) }},
		{"pins_leaf", sampleCommit().Pins.Entries, func() ([]byte, error) { return PinsMap.EncodeLeaf(sampleCommit().Pins.Entries) }, func(b []byte) (any, error) { return PinsMap.DecodeLeaf(b) }},
		{"lineage_leaf", sampleLineage(), func() ([]byte, error) { return LineageMap.EncodeLeaf(sampleLineage()) }, func(b []byte) (any, error) { return LineageMap.DecodeLeaf(b) }},
		{"manifest_node", sampleManifestNode(), func() ([]byte, error) { return ManifestMap.EncodeNode(sampleManifestNode()) }, func(b []byte) (any, error) { return ManifestMap.DecodeNode(b) }},
		{"upload", sampleUpload(), func() ([]byte, error) { return EncodeUpload(sampleUpload()) }, decodeUpload},
		{"upload_started", sampleStartedUpload(), func() ([]byte, error) { return EncodeUpload(sampleStartedUpload()) }, decodeUpload},
	}
}

// The golden files are the format: a change to them is a format change.
// Encoding is a pure function of the value, and decoding inverts it.
func TestEncode_MatchesGoldenBytes_IsStable_AndDecodeInverts(t *testing.T) {
	for _, c := range codecs() {
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
				t.Fatalf("two encodings differ:\n%s\n%s", got, again)
			}
			if len(got) > MaxObjectSize {
				t.Fatalf("%d bytes, over %d", len(got), MaxObjectSize)
			}
			v, err := c.decode(got)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(v, c.value) {
				t.Fatalf("decode(encode(v)) = %+v, want %+v", v, c.value)
			}
		})
	}
}

func TestEncodeCommit_TimeZone_DoesNotChangeBytes(t *testing.T) {
	a := sampleCommit()
	b := sampleCommit()
	b.Time = a.Time.In(time.FixedZone("east", 5*3600))
	if ab, bb := mustEncode(t)(sealed(a)()), mustEncode(t)(sealed(b)()); !bytes.Equal(ab, bb) {
		t.Fatalf("bytes differ:\n%s\n%s", ab, bb)
	}
}

func TestSealCommit_DigestNamesTheContent(t *testing.T) {
	c, b, err := SealCommit(sampleCommit())
	if err != nil {
		t.Fatal(err)
	}
	if c.ID.Digest.IsZero() || !strings.Contains(string(b), `"id":"`+c.ID.String()+`"`) {
		t.Fatalf("sealed id %s not in %s", c.ID, b)
	}
	got, err := DecodeCommit(b)
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("decode = %+v, %v; want %+v", got, err, c)
	}
	// Any change of content changes the id.
	other := sampleCommit()
	other.Message += "!"
	c2, _, err := SealCommit(other)
	if err != nil || c2.ID == c.ID || c2.ID.Tree != c.ID.Tree || c2.ID.Seq != c.ID.Seq {
		t.Fatalf("changed commit sealed to %v (was %v), %v", c2.ID, c.ID, err)
	}
	// A stored commit whose content does not match its digest is refused, so
	// an id can never name two byte strings.
	forged := bytes.Replace(b, []byte("merge main"), []byte("merge mainX"), 1)
	if _, err := DecodeCommit(forged); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("forged commit: %v", err)
	}
	// And so is a non-canonical spelling of the same content.
	spaced := bytes.Replace(b, []byte(`"seq":3`), []byte(`"seq": 3`), 1)
	if _, err := DecodeCommit(spaced); !errors.Is(err, ErrMalformed) {
		t.Fatalf("non-canonical commit: %v", err)
	}
	// Sealing ignores a digest it is given.
	stale := sampleCommit()
	stale.ID.Digest = Digest{9}
	if c3, _, _ := SealCommit(stale); c3.ID != c.ID {
		t.Fatalf("sealing with a stale digest gave %v, want %v", c3.ID, c.ID)
	}
}

// golden returns the golden bytes of name.
func golden(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDecode_RejectsEachViolation_WithTypedError(t *testing.T) {
	ref := func(b string) error { _, err := DecodeBranchRef([]byte(b)); return err }
	version := func(b string) error { _, err := DecodeTableVersion([]byte(b)); return err }
	leaf := func(b string) error { _, err := ManifestMap.DecodeLeaf([]byte(b)); return err }
	lineage := func(b string) error { _, err := LineageMap.DecodeLeaf([]byte(b)); return err }
	pins := func(b string) error { _, err := PinsMap.DecodeLeaf([]byte(b)); return err }
	node := func(b string) error { _, err := ManifestMap.DecodeNode([]byte(b)); return err }
	commit := func(b string) error { _, err := DecodeCommit([]byte(b)); return err }
	graph := func(b string) error { _, err := DecodeGraph([]byte(b)); return err }
	tag := func(b string) error { _, err := DecodeTag([]byte(b)); return err }
	upload := func(b string) error { _, err := DecodeUpload([]byte(b)); return err }
	feat3 := "01J0000000000000000000FEAT-3-dd040000000000000000000000000000"
	cases := []struct {
		name     string
		decode   func(string) error
		in       string
		old, new string
		want     error
		detail   string
	}{
		// The envelope, the same for every kind.
		{"empty input", commit, "", ``, ``, ErrMalformed, "empty input"},
		{"not an object", commit, `[1]`, ``, ``, ErrMalformed, "not a JSON object"},
		{"bare null", commit, `null`, ``, ``, ErrMalformed, "not a JSON object"},
		{"truncated", commit, `{"format":3`, ``, ``, ErrMalformed, "invalid JSON"},
		{"trailing object", tag, golden(t, "tag") + `{}`, ``, ``, ErrMalformed, "trailing data"},
		{"trailing garbage", tag, golden(t, "tag") + ` x`, ``, ``, ErrMalformed, "invalid JSON"},
		{"invalid utf-8", tag, golden(t, "tag"), "release/v1", "release/\xff", ErrMalformed, "invalid UTF-8"},
		{"format missing", tag, golden(t, "tag"), `"format":3,`, ``, ErrMalformed, `"format": missing`},
		{"format string", tag, golden(t, "tag"), `"format":3`, `"format":"2"`, ErrMalformed, "not an integer"},
		{"format float", tag, golden(t, "tag"), `"format":3`, `"format":3.0`, ErrMalformed, "not an integer"},
		{"wrong kind", commit, golden(t, "tag"), ``, ``, ErrMalformed, `is "tag", want "commit"`},
		{"unknown field", tag, golden(t, "tag"), `"op":`, `"extra":"x","op":`, ErrMalformed, `"extra": unknown field`},
		{"case-variant field", tag, golden(t, "tag"), `"op":`, `"OP":`, ErrMalformed, `"OP": unknown field`},
		{"duplicate field", tag, golden(t, "tag"), `"op":"op-tag-5"`, `"op":"op-tag-5","op":"op-other"`, ErrMalformed, `"op": duplicate key`},
		{"missing field", graph, golden(t, "graph"), `,"default_branch":"main"`, ``, ErrMalformed, `"default_branch": missing`},
		{"null field", commit, golden(t, "commit"), `"seq":3`, `"seq":null`, ErrMalformed, "null value"},
		{"empty optional", ref, golden(t, "branch_ref_fence"), `"op":`, `"branch":"","op":`, ErrMalformed, "present but empty"},
		{"too large", tag, golden(t, "tag") + strings.Repeat(" ", MaxObjectSize), ``, ``, ErrTooLarge, "encoded size"},
		{"non-canonical time", tag, golden(t, "tag"), `.890000000Z`, `.89Z`, ErrMalformed, `"created_at": not an RFC 3339 time`},
		{"offset time", tag, golden(t, "tag"), `05:06:07.890000000Z`, `06:06:07.890000000+01:00`, ErrMalformed, "canonical form"},
		{"bad tag state", tag, golden(t, "tag"), `"state":"live"`, `"state":"dead"`, ErrMalformed, "not live or retired"},
		{"tag of an id without digest", tag, golden(t, "tag"), `-7-bb020000000000000000000000000000"`, `-7"`, ErrInvalidName, "missing '-' and the digest"},
		{"graph name", graph, golden(t, "graph"), `"name":"sales"`, `"name":"Sales"`, ErrInvalidName, "graph name"},
		{"graph with an unknown field", graph, golden(t, "graph"), `"default_branch":"main"`, `"default_branch":"main","upgrade_op":"op-upgrade-1"`, ErrMalformed, `"upgrade_op": unknown field`},
		// Commits.
		{"wrong type", commit, golden(t, "commit"), `"seq":3`, `"seq":"3"`, ErrMalformed, "wrong type"},
		{"float seq", commit, golden(t, "commit"), `"seq":3`, `"seq":3.5`, ErrMalformed, "wrong type"},
		{"lower-case ulid", commit, golden(t, "commit"), `"tree":"01J0000000000000000000FEAT"`, `"tree":"01j0000000000000000000feat"`, ErrInvalidName, "canonical upper case"},
		{"id mismatch", commit, golden(t, "commit"), `"seq":3`, `"seq":4`, ErrMalformed, "does not match tree and seq"},
		{"commit id without digest", commit, golden(t, "commit"), `"id":"01J0000000000000000000FEAT-3-`, `"id":"01J0000000000000000000FEAT-3","x":"`, ErrMalformed, ""},
		{"parent without digest", commit, golden(t, "commit"), `"parents":["01J0000000000000000000FEAT-2-aa010000000000000000000000000000"`, `"parents":["01J0000000000000000000FEAT-2"`, ErrInvalidName, "missing '-' and the digest"},
		{"bad first parent", commit, golden(t, "commit"), `"parents":["01J0000000000000000000FEAT-2-`, `"parents":["01J0000000000000000000FEAT-1-`, ErrMalformed, "first parent must be"},
		{"lineage misses parent", commit, golden(t, "commit"), `{"tree":"01J0000000000000000000MA1N","seq":7,`, `{"tree":"01J0000000000000000000MA1N","seq":6,`, ErrMalformed, "not covered"},
		{"inline lineage holds own tree", commit, golden(t, "commit"), `{"tree":"01J00000000000000000000THR","seq":4`, `{"tree":"01J0000000000000000000FEAT","seq":4`, ErrMalformed, ""},
		{"invalid branch name", commit, golden(t, "commit"), `"branch":"feature/x"`, `"branch":"feature//x"`, ErrInvalidName, "segment 2 is empty"},
		{"invalid table name", commit, golden(t, "commit"), `"table":"orders"`, `"table":"Orders"`, ErrMalformed, "invalid table name"},
		{"duplicate map key", commit, golden(t, "commit"), `{"table":"orders"`, `{"table":"orders","table":"orders"`, ErrMalformed, "duplicate key"},
		{"chunked map count 0", commit, golden(t, "commit_chunked"), `"count":10000`, `"count":0`, ErrMalformed, "at least one entry"},
		{"pins both forms", commit, golden(t, "commit_chunked"), `"pins":{"root"`, `"pins":{"entries":[],"root"`, ErrMalformed, "unknown field"},
		// Branch refs.
		{"live ref without head", ref, golden(t, "branch_ref_live"), `,"head":"` + feat3 + `"`, ``, ErrMalformed, `"head": required`},
		{"fence with head", ref, golden(t, "branch_ref_fence"), `"op":`, `"head":"` + feat3 + `","op":`, ErrMalformed, "set on a fence"},
		{"head in another tree", ref, golden(t, "branch_ref_live"), `"head":"01J0000000000000000000FEAT-3`, `"head":"01J0000000000000000000MA1N-3`, ErrMalformed, "not a commit of the ref's tree"},
		{"live ref without tree", ref, golden(t, "branch_ref_live"), `"tree":"01J0000000000000000000FEAT",`, ``, ErrMalformed, `"tree": does not match`},
		{"live ref with reason", ref, golden(t, "branch_ref_live"), `"op":"op-create-2"`, `"op":"op-create-2","reason":"x"`, ErrMalformed, "set on a live ref"},
		{"retired ref without retired_op", ref, golden(t, "branch_ref_retired"), `,"retired_op":"op-delete-3"`, ``, ErrMalformed, `"retired_op": empty`},
		{"fence without reason", ref, golden(t, "branch_ref_fence"), `,"reason":"cleanup"`, ``, ErrMalformed, `"reason": empty`},
		// Table versions and map chunks.
		{"counts without a base", version, golden(t, "table_version"), `"op":`, `"added":1,"removed":0,"replaced":0,"op":`, ErrMalformed, `"base": missing beside`},
		{"base without counts", version, golden(t, "table_version_chunked"), `,"replaced":0`, ``, ErrMalformed, "base without all of"},
		{"negative count", version, golden(t, "table_version_chunked"), `"removed":2`, `"removed":-2`, ErrMalformed, "negative count"},
		{"base is the version", version, golden(t, "table_version_chunked"), `"base":"01J000000000000000000VERA1"`, `"base":"01J000000000000000000VERB2"`, ErrMalformed, "the version itself"},
		{"bytes not the sum", version, golden(t, "table_version"), `"bytes":1333`, `"bytes":1334`, ErrMalformed, "not the total size"},
		{"entry with both object and external", version, golden(t, "table_version"), `"external":"landing`, `"object":"01J0000000000000000000BJA1","external":"landing`, ErrMalformed, "exactly one of object and external"},
		{"external without etag", version, golden(t, "table_version"), `,"etag":"\"9a0364b9e99bb480dd25e1f0284c8555\""`, ``, ErrMalformed, "required for an external object"},
		{"bad sha", version, golden(t, "table_version"), sampleSHA, strings.ToUpper(sampleSHA), ErrMalformed, "hex"},
		{"entry name dot segment", leaf, golden(t, "manifest_leaf"), `"raw/2025/03/04/events.parquet"`, `"raw/../events.parquet"`, ErrMalformed, `".."`},
		{"entries unsorted", leaf, golden(t, "manifest_leaf"), `"part-00001.parquet"`, `"000-first"`, ErrMalformed, "strictly ascending"},
		{"empty leaf", leaf, `{"format":3,"kind":"map_leaf","map":"manifest","entries":[]}`, ``, ``, ErrMalformed, "at least one entry"},
		{"wrong map kind", leaf, golden(t, "pins_leaf"), ``, ``, ErrMalformed, `is "pins", want "manifest"`},
		{"entry extra field", leaf, golden(t, "manifest_leaf"), `"size":0,`, `"size":0,"Size":0,`, ErrMalformed, "unknown field"},
		{"pin counts without a base", pins, golden(t, "pins_leaf"), `"version":"01J000000000000000000VERA1"`, `"version":"01J000000000000000000VERA1","added":1,"removed":0,"replaced":0`, ErrMalformed, `base": missing beside`},
		{"pin base without counts", pins, golden(t, "pins_leaf_counted"), `,"replaced":2`, ``, ErrMalformed, "base without all of"},
		{"pin negative count", pins, golden(t, "pins_leaf_counted"), `"removed":1`, `"removed":-1`, ErrMalformed, "negative count"},
		{"pin base is the version", pins, golden(t, "pins_leaf_counted"), `"base":"01J000000000000000000VERA1"`, `"base":"01J000000000000000000VERB2"`, ErrMalformed, "the version itself"},
		{"lineage entry without digest", lineage, golden(t, "lineage_leaf"), `,"digest":"ff060000000000000000000000000000"`, ``, ErrMalformed, `digest": missing`},
		{"node level 0", node, golden(t, "manifest_node"), `"level":1`, `"level":0`, ErrMalformed, "level"},
		{"node children unsorted", node, golden(t, "manifest_node"), `"part-00300.parquet"`, `"part-00001.parquet"`, ErrMalformed, "strictly ascending"},
		{"node child count 0", node, golden(t, "manifest_node"), `"count":127`, `"count":0`, ErrMalformed, "less than 1"},
		// Upload records.
		{"upload of a key that is no data object", upload, golden(t, "upload"), `/objects/`, `/versions/`, ErrMalformed, `"object_key"`},
		{"upload of an object key without a ULID", upload, golden(t, "upload"), `/objects/01J0000000000000000000BJB2`, `/objects/part-1`, ErrInvalidName, "object: not 26 characters"},
		{"upload with an empty upload_id", upload, golden(t, "upload"), `"created_at"`, `"upload_id":"","created_at"`, ErrMalformed, "present but empty"},
		{"upload_id with a control character", upload, golden(t, "upload_started"), `"upload_id":"2~`, `"upload_id":"\u0007`, ErrMalformed, "control character"},
		{"upload without created_at", upload, golden(t, "upload"), `,"created_at":"2025-03-04T05:06:07.890000000Z"`, ``, ErrMalformed, `"created_at": missing`},
		{"node chunk hash upper case", node, golden(t, "manifest_node"), sampleHash.String(), strings.ToUpper(sampleHash.String()), ErrInvalidName, "lower-case hex"},
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

// An object of another format version — an older one, or one this build does
// not know yet — is refused by every decoder with an UnsupportedFormatError
// naming the version, before any other field is read: never misread as this
// version. The fields of the other version may be anything.
func TestDecode_AnotherFormatVersion_IsUnsupportedFormatNamingIt_ForEveryKind(t *testing.T) {
	decoders := []struct {
		golden string
		kind   Kind
		decode func([]byte) error
	}{
		{"graph", KindGraph, func(b []byte) error { _, err := DecodeGraph(b); return err }},
		{"table_version", KindTableVersion, func(b []byte) error { _, err := DecodeTableVersion(b); return err }},
		{"commit", KindCommit, func(b []byte) error { _, err := DecodeCommit(b); return err }},
		{"branch_ref_live", KindBranchRef, func(b []byte) error { _, err := DecodeBranchRef(b); return err }},
		{"tag", KindTag, func(b []byte) error { _, err := DecodeTag(b); return err }},
		{"upload_started", KindUpload, func(b []byte) error { _, err := DecodeUpload(b); return err }},
		{"manifest_leaf", KindMapLeaf, func(b []byte) error { _, err := ManifestMap.DecodeLeaf(b); return err }},
		{"manifest_node", KindMapNode, func(b []byte) error { _, err := ManifestMap.DecodeNode(b); return err }},
	}
	for _, d := range decoders {
		for _, version := range []int64{0, 1, 2, 7} {
			t.Run(fmt.Sprintf("%s/format_%d", d.golden, version), func(t *testing.T) {
				in := strings.Replace(golden(t, d.golden), `"format":3`, fmt.Sprintf(`"format":%d,"field_of_that_version":{"x":null}`, version), 1)
				err := d.decode([]byte(in))
				var ue *UnsupportedFormatError
				if !errors.Is(err, ErrUnsupportedFormat) || !errors.As(err, &ue) || ue.Version != version || ue.Want != Version || ue.Kind != d.kind {
					t.Fatalf("error %v, want *UnsupportedFormatError{Kind: %s, Version: %d, Want: %d}", err, d.kind, version, Version)
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("format version %d", version)) {
					t.Fatalf("error %q does not name version %d", err, version)
				}
			})
		}
	}
}

func TestEncode_InvalidValues_AreRejectedNamingTheField(t *testing.T) {
	type tc struct {
		name  string
		err   error
		field string
		want  error
	}
	seal := func(c Commit) error { _, _, err := SealCommit(c); return err }
	c1 := sampleCommit()
	c1.Parents = append(c1.Parents, CommitID{Tree: treeOther, Seq: 1, Digest: Digest{1}})
	c2 := sampleRootCommit()
	c2.Lineage = MapRef[LineageEntry]{Entries: []LineageEntry{{Tree: treeMain, Seq: 0, Digest: Digest{1}}}}
	c3 := sampleRootCommit()
	c3.Message = "bad\x00byte"
	c4 := sampleRootCommit()
	c4.Op = "op with space"
	c5 := sampleRootCommit()
	c5.Time = time.Time{}
	c6 := sampleRootCommit()
	c6.Parents = []CommitID{{Tree: treeMain, Seq: 3, Digest: Digest{1}}}
	c7 := sampleCommit()
	c7.Parents[1].Digest = Digest{}
	c8 := sampleCommit()
	c8.RestoredFrom.Digest = Digest{}
	r1 := sampleLiveRef()
	r1.Tree = treeOther
	r2 := sampleFence()
	r2.Branch = "feature/y"
	r2.Tree = treeFeature
	g1 := sampleGraph()
	g1.Name = "Sales"
	v1 := sampleTableVersion()
	v1.Entries.Entries[0], v1.Entries.Entries[1] = v1.Entries.Entries[1], v1.Entries.Entries[0]
	tg := sampleTag()
	tg.RetiredOp = "op-x"
	tg2 := sampleTag()
	tg2.Commit.Digest = Digest{}
	up1 := sampleUpload()
	up1.ObjectKey = TableVersionKey("sales", "orders", versionA)
	up2 := sampleStartedUpload()
	up2.UploadID = "id\nsplit"
	up3 := sampleUpload()
	up3.CreatedAt = time.Time{}
	cases := []tc{
		{"three parents", seal(c1), "parents", ErrMalformed},
		{"own tree in lineage", seal(c2), "lineage", ErrMalformed},
		{"control char in message", seal(c3), "message", ErrMalformed},
		{"bad op", seal(c4), "op", ErrMalformed},
		{"zero time", seal(c5), "time", ErrMalformed},
		{"fork parent in own tree", seal(c6), "parents", ErrMalformed},
		{"parent without digest", seal(c7), "parents", ErrMalformed},
		{"restored_from without digest", seal(c8), "restored_from", ErrMalformed},
		{"ref tree mismatch", errOnly(EncodeBranchRef(r1)), "tree", ErrMalformed},
		{"fence branch mismatch", errOnly(EncodeBranchRef(r2)), "branch", ErrMalformed},
		{"graph name", errOnly(EncodeGraph(g1)), "name", ErrInvalidName},
		{"unsorted entries", errOnly(EncodeTableVersion(v1)), "entries", ErrMalformed},
		{"retired_op on live tag", errOnly(EncodeTag(tg)), "retired_op", ErrMalformed},
		{"tag of an id without digest", errOnly(EncodeTag(tg2)), "commit", ErrMalformed},
		{"upload of a version key", errOnly(EncodeUpload(up1)), "object_key", ErrInvalidName},
		{"upload id with a newline", errOnly(EncodeUpload(up2)), "upload_id", ErrMalformed},
		{"upload without a time", errOnly(EncodeUpload(up3)), "created_at", ErrMalformed},
	}
	for _, c := range cases {
		var me *MalformedError
		if !errors.Is(c.err, c.want) || !errors.As(c.err, &me) || !strings.HasPrefix(me.Field, c.field) {
			t.Errorf("%s: error %v, want %v naming field %q", c.name, c.err, c.want, c.field)
		}
	}
}

func errOnly(_ []byte, err error) error { return err }

func itoa3(i int) string {
	return string([]byte{byte('0' + i/1000%10), byte('0' + i/100%10), byte('0' + i/10%10), byte('0' + i%10)})
}

// The boundary rule is part of the format: these keys split where they split.
func TestBoundaryAfter_IsFixed(t *testing.T) {
	var hits, manifest []string
	for i := 0; i < 2000; i++ {
		k := "part-" + itoa3(i)
		if PinsMap.BoundaryAfter(0, k) {
			hits = append(hits, k)
		}
		if ManifestMap.BoundaryAfter(0, k) {
			manifest = append(manifest, k)
		}
	}
	want := goldenBoundaries(t)
	if strings.Join(hits, ",") != want {
		t.Fatalf("boundaries moved:\n got %s\nwant %s", strings.Join(hits, ","), want)
	}
	if n := len(hits); n < 5 || n > 40 {
		t.Fatalf("%d boundaries in 2000 keys, want about %d", n, 2000/MapBoundaryModulus)
	}
	// A manifest's modulus is a multiple of the others': its boundaries are some of theirs.
	if n := len(manifest); n < 1 || n > 12 {
		t.Fatalf("%d manifest boundaries in 2000 keys, want about %d", n, 2000/ManifestBoundaryModulus)
	}
	for _, k := range manifest {
		if !slices.Contains(hits, k) {
			t.Fatalf("manifest boundary %s is not a pins boundary", k)
		}
	}
	if PinsMap.BoundaryAfter(0, "part-0007") == PinsMap.BoundaryAfter(1, "part-0007") && PinsMap.BoundaryAfter(0, "x") == PinsMap.BoundaryAfter(1, "x") &&
		PinsMap.BoundaryAfter(0, hits[0]) == PinsMap.BoundaryAfter(1, hits[0]) && PinsMap.BoundaryAfter(0, hits[1]) == PinsMap.BoundaryAfter(1, hits[1]) {
		t.Fatalf("levels do not change the boundary hash")
	}
}

func goldenBoundaries(t *testing.T) string {
	t.Helper()
	path := filepath.Join("testdata", "golden", "boundaries.txt")
	if *update {
		var hits []string
		for i := 0; i < 2000; i++ {
			if k := "part-" + itoa3(i); PinsMap.BoundaryAfter(0, k) {
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
	v := sampleTableVersion()
	v.Entries.Entries = big
	if _, err := EncodeTableVersion(v); !errors.Is(err, ErrMalformed) {
		t.Fatalf("oversize inline manifest: %v", err)
	}
}
