package format

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current encoder")

// codec ties one sample value of each kind to its encoder and decoder.
type codec struct {
	name   string
	encode func() ([]byte, error)
	decode func([]byte) (any, error)
}

func codecs() []codec {
	return []codec{
		{"graph", func() ([]byte, error) { return EncodeGraph(sampleGraph()) }, func(b []byte) (any, error) { return DecodeGraph(b) }},
		{"table_version", func() ([]byte, error) { return EncodeTableVersion(sampleTableVersion()) }, func(b []byte) (any, error) { return DecodeTableVersion(b) }},
		{"commit", func() ([]byte, error) { return EncodeCommit(sampleCommit()) }, func(b []byte) (any, error) { return DecodeCommit(b) }},
		{"commit_root", func() ([]byte, error) { return EncodeCommit(sampleRootCommit()) }, func(b []byte) (any, error) { return DecodeCommit(b) }},
		{"branch_ref_live", func() ([]byte, error) { return EncodeBranchRef(sampleLiveRef()) }, func(b []byte) (any, error) { return DecodeBranchRef(b) }},
		{"branch_ref_retired", func() ([]byte, error) { return EncodeBranchRef(sampleRetiredRef()) }, func(b []byte) (any, error) { return DecodeBranchRef(b) }},
		{"branch_ref_fence", func() ([]byte, error) { return EncodeBranchRef(sampleFence()) }, func(b []byte) (any, error) { return DecodeBranchRef(b) }},
		{"tag", func() ([]byte, error) { return EncodeTag(sampleTag()) }, func(b []byte) (any, error) { return DecodeTag(b) }},
	}
}

// The golden files are the format: a change to them is a format change.
func TestEncode_MatchesGoldenBytes(t *testing.T) {
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
		})
	}
}

func TestEncode_SameValueTwice_IdenticalBytes(t *testing.T) {
	for _, c := range codecs() {
		a := mustEncode(t)(c.encode())
		b := mustEncode(t)(c.encode())
		if !bytes.Equal(a, b) {
			t.Errorf("%s: two encodings differ:\n%s\n%s", c.name, a, b)
		}
	}
}

func TestEncodeCommit_MapInsertionOrderAndTimeZone_DoNotChangeBytes(t *testing.T) {
	a := sampleCommit()
	b := sampleCommit()
	b.Pins = map[string]ulid.ULID{}
	b.Pins["orders"] = versionA
	b.Pins["customers"] = versionA
	b.Lineage = map[ulid.ULID]int64{treeOther: 4}
	b.Lineage[treeMain] = 7
	b.Time = a.Time.In(time.FixedZone("east", 5*3600))
	ab := mustEncode(t)(EncodeCommit(a))
	bb := mustEncode(t)(EncodeCommit(b))
	if !bytes.Equal(ab, bb) {
		t.Fatalf("bytes differ:\n%s\n%s", ab, bb)
	}
}

func TestDecode_InvertsEncode(t *testing.T) {
	checks := []struct {
		name  string
		value any
		enc   func() ([]byte, error)
		dec   func([]byte) (any, error)
	}{
		{"graph", sampleGraph(), func() ([]byte, error) { return EncodeGraph(sampleGraph()) }, func(b []byte) (any, error) { return DecodeGraph(b) }},
		{"table_version", sampleTableVersion(), func() ([]byte, error) { return EncodeTableVersion(sampleTableVersion()) }, func(b []byte) (any, error) { return DecodeTableVersion(b) }},
		{"commit", sampleCommit(), func() ([]byte, error) { return EncodeCommit(sampleCommit()) }, func(b []byte) (any, error) { return DecodeCommit(b) }},
		{"commit_root", sampleRootCommit(), func() ([]byte, error) { return EncodeCommit(sampleRootCommit()) }, func(b []byte) (any, error) { return DecodeCommit(b) }},
		{"live", sampleLiveRef(), func() ([]byte, error) { return EncodeBranchRef(sampleLiveRef()) }, func(b []byte) (any, error) { return DecodeBranchRef(b) }},
		{"retired", sampleRetiredRef(), func() ([]byte, error) { return EncodeBranchRef(sampleRetiredRef()) }, func(b []byte) (any, error) { return DecodeBranchRef(b) }},
		{"fence", sampleFence(), func() ([]byte, error) { return EncodeBranchRef(sampleFence()) }, func(b []byte) (any, error) { return DecodeBranchRef(b) }},
		{"tag", sampleTag(), func() ([]byte, error) { return EncodeTag(sampleTag()) }, func(b []byte) (any, error) { return DecodeTag(b) }},
	}
	for _, c := range checks {
		b := mustEncode(t)(c.enc())
		got, err := c.dec(b)
		if err != nil {
			t.Errorf("%s: decode: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(got, c.value) {
			t.Errorf("%s: decode(encode(v)) = %+v, want %+v", c.name, got, c.value)
		}
	}
}

// replaceIn returns the golden bytes of name with old replaced by new, once.
func replaceIn(t *testing.T, name, old, new string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s does not contain %q", name, old)
	}
	return bytes.Replace(b, []byte(old), []byte(new), 1)
}

func TestDecode_RejectsEachStrictnessViolation_WithTypedError(t *testing.T) {
	commitOf := func(b []byte) error { _, err := DecodeCommit(b); return err }
	tagOf := func(b []byte) error { _, err := DecodeTag(b); return err }
	refOf := func(b []byte) error { _, err := DecodeBranchRef(b); return err }
	versionOf := func(b []byte) error { _, err := DecodeTableVersion(b); return err }
	graphOf := func(b []byte) error { _, err := DecodeGraph(b); return err }
	cases := []struct {
		name   string
		decode func([]byte) error
		input  []byte
		want   error
		detail string
	}{
		{"empty input", commitOf, []byte{}, ErrMalformed, "empty input"},
		{"not an object", commitOf, []byte(`[1]`), ErrMalformed, "not a JSON object"},
		{"bare null", commitOf, []byte(`null`), ErrMalformed, "not a JSON object"},
		{"truncated", commitOf, []byte(`{"format":1`), ErrMalformed, "invalid JSON"},
		{"trailing object", tagOf, append(replaceIn(t, "tag", "", ""), `{}`...), ErrMalformed, "trailing data"},
		{"trailing garbage", tagOf, append(replaceIn(t, "tag", "", ""), ` x`...), ErrMalformed, "invalid JSON"},
		{"invalid utf-8", tagOf, replaceIn(t, "tag", "release/v1", "release/\xff"), ErrMalformed, "invalid UTF-8"},
		{"format 2", commitOf, replaceIn(t, "commit", `"format":1`, `"format":2,"new_field":{"x":null}`), ErrUnsupportedFormat, "version 2"},
		{"format missing", tagOf, replaceIn(t, "tag", `"format":1,`, ``), ErrMalformed, `"format": missing`},
		{"format string", tagOf, replaceIn(t, "tag", `"format":1`, `"format":"1"`), ErrMalformed, "not an integer"},
		{"format float", tagOf, replaceIn(t, "tag", `"format":1`, `"format":1.0`), ErrMalformed, "not an integer"},
		{"wrong kind", commitOf, replaceIn(t, "tag", "", ""), ErrMalformed, `is "tag", want "commit"`},
		{"unknown field", tagOf, replaceIn(t, "tag", `"op":`, `"extra":"x","op":`), ErrMalformed, `"extra": unknown field`},
		{"case-variant field", tagOf, replaceIn(t, "tag", `"op":`, `"OP":`), ErrMalformed, `"OP": unknown field`},
		{"duplicate field", tagOf, replaceIn(t, "tag", `"op":"op-tag-5"`, `"op":"op-tag-5","op":"op-other"`), ErrMalformed, `"op": duplicate key`},
		{"duplicate map key", commitOf, replaceIn(t, "commit", `"customers":`, `"orders":"01J000000000000000000VERA1","customers":`), ErrMalformed, "duplicate key"},
		{"missing field", graphOf, replaceIn(t, "graph", `,"default_branch":"main"`, ``), ErrMalformed, `"default_branch": missing`},
		{"null field", commitOf, replaceIn(t, "commit", `"seq":3`, `"seq":null`), ErrMalformed, "null value"},
		{"null in map", commitOf, replaceIn(t, "commit", `"lineage":{`, `"lineage":{"01J00000000000000000000ZZZ":null,`), ErrMalformed, "null value"},
		{"empty optional", refOf, replaceIn(t, "branch_ref_fence", `"op":`, `"branch":"","op":`), ErrMalformed, "present but empty"},
		{"wrong type", commitOf, replaceIn(t, "commit", `"seq":3`, `"seq":"3"`), ErrMalformed, "wrong type"},
		{"float seq", commitOf, replaceIn(t, "commit", `"seq":3`, `"seq":3.5`), ErrMalformed, "wrong type"},
		{"lower-case ulid", commitOf, replaceIn(t, "commit", `"tree":"01J0000000000000000000FEAT"`, `"tree":"01j0000000000000000000feat"`), ErrInvalidName, "canonical upper case"},
		{"id mismatch", commitOf, replaceIn(t, "commit", `"seq":3`, `"seq":4`), ErrMalformed, "does not match tree and seq"},
		{"bad first parent", commitOf, replaceIn(t, "commit", `"parents":["01J0000000000000000000FEAT-2"`, `"parents":["01J0000000000000000000FEAT-1"`), ErrMalformed, "first parent must be"},
		{"lineage misses parent", commitOf, replaceIn(t, "commit", `"01J0000000000000000000MA1N":7`, `"01J0000000000000000000MA1N":6`), ErrMalformed, "not covered"},
		{"non-canonical time", tagOf, replaceIn(t, "tag", `.890000000Z`, `.89Z`), ErrMalformed, `"created_at": not an RFC 3339 time`},
		{"offset time", tagOf, replaceIn(t, "tag", `05:06:07.890000000Z`, `06:06:07.890000000+01:00`), ErrMalformed, "canonical form"},
		{"invalid branch name", commitOf, replaceIn(t, "commit", `"branch":"feature/x"`, `"branch":"feature//x"`), ErrInvalidName, "segment 2 is empty"},
		{"invalid table name", commitOf, replaceIn(t, "commit", `"orders":`, `"Orders":`), ErrInvalidName, "table name"},
		{"unsorted objects", versionOf, replaceIn(t, "table_version", `"01J0000000000000000000BJA1"`, `"01J0000000000000000000BJZ1"`), ErrMalformed, "strictly ascending"},
		{"object entry extra field", versionOf, replaceIn(t, "table_version", `"size":0,`, `"size":0,"Size":0,`), ErrMalformed, `objects[0].Size": unknown field`},
		{"bad sha", versionOf, replaceIn(t, "table_version", sampleSHA, strings.ToUpper(sampleSHA)), ErrMalformed, "hex"},
		{"live ref without tree", refOf, replaceIn(t, "branch_ref_live", `"tree":"01J0000000000000000000FEAT",`, ``), ErrMalformed, `"tree": does not match`},
		{"live ref with reason", refOf, replaceIn(t, "branch_ref_live", `"op":"op-create-2"`, `"op":"op-create-2","reason":"x"`), ErrMalformed, "set on a live ref"},
		{"retired ref without retired_op", refOf, replaceIn(t, "branch_ref_retired", `,"retired_op":"op-delete-3"`, ``), ErrMalformed, `"retired_op": empty`},
		{"fence without reason", refOf, replaceIn(t, "branch_ref_fence", `,"reason":"cleanup"`, ``), ErrMalformed, `"reason": empty`},
		{"bad state", tagOf, replaceIn(t, "tag", `"state":"live"`, `"state":"dead"`), ErrMalformed, "not live or retired"},
		{"too large", tagOf, append(replaceIn(t, "tag", "", ""), bytes.Repeat([]byte(" "), MaxObjectSize)...), ErrTooLarge, "encoded size"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.decode(c.input)
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v does not match %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.detail) {
				t.Fatalf("error %q does not mention %q", err, c.detail)
			}
		})
	}
}

func TestDecode_UnsupportedFormat_CarriesVersion(t *testing.T) {
	_, err := DecodeGraph(replaceIn(t, "graph", `"format":1`, `"format":7`))
	var ue *UnsupportedFormatError
	if !errors.As(err, &ue) || ue.Version != 7 || ue.Kind != KindGraph {
		t.Fatalf("error %v, want *UnsupportedFormatError{Version: 7, Kind: graph}", err)
	}
}

func TestEncode_InvalidValues_AreRejectedNamingTheField(t *testing.T) {
	type tc struct {
		name  string
		err   error
		field string
		want  error
	}
	c1 := sampleCommit()
	c1.Parents = append(c1.Parents, CommitID{Tree: treeOther, Seq: 1})
	c2 := sampleRootCommit()
	c2.Lineage = map[ulid.ULID]int64{treeMain: 0}
	c3 := sampleRootCommit()
	c3.Message = "bad\x00byte"
	c4 := sampleRootCommit()
	c4.Op = "op with space"
	c5 := sampleRootCommit()
	c5.Time = time.Time{}
	c6 := sampleRootCommit()
	c6.Parents = []CommitID{{Tree: treeMain, Seq: 3}}
	r1 := sampleLiveRef()
	r1.Tree = treeOther
	r2 := sampleFence()
	r2.Branch = "feature/y"
	r2.Tree = treeFeature
	g1 := sampleGraph()
	g1.Name = "Sales"
	v1 := sampleTableVersion()
	v1.Objects[0], v1.Objects[1] = v1.Objects[1], v1.Objects[0]
	tg := sampleTag()
	tg.RetiredOp = "op-x"
	cases := []tc{
		{"three parents", errOnly(EncodeCommit(c1)), "parents", ErrMalformed},
		{"own tree in lineage", errOnly(EncodeCommit(c2)), "lineage", ErrMalformed},
		{"control char in message", errOnly(EncodeCommit(c3)), "message", ErrMalformed},
		{"bad op", errOnly(EncodeCommit(c4)), "op", ErrMalformed},
		{"zero time", errOnly(EncodeCommit(c5)), "time", ErrMalformed},
		{"fork parent in own tree", errOnly(EncodeCommit(c6)), "parents", ErrMalformed},
		{"ref tree mismatch", errOnly(EncodeBranchRef(r1)), "tree", ErrMalformed},
		{"fence branch mismatch", errOnly(EncodeBranchRef(r2)), "branch", ErrMalformed},
		{"graph name", errOnly(EncodeGraph(g1)), "name", ErrInvalidName},
		{"unsorted objects", errOnly(EncodeTableVersion(v1)), "objects[1].id", ErrMalformed},
		{"retired_op on live tag", errOnly(EncodeTag(tg)), "retired_op", ErrMalformed},
	}
	for _, c := range cases {
		var me *MalformedError
		if !errors.Is(c.err, c.want) || !errors.As(c.err, &me) || me.Field != c.field {
			t.Errorf("%s: error %v, want %v naming field %q", c.name, c.err, c.want, c.field)
		}
	}
}

func errOnly(_ []byte, err error) error { return err }

// worstCaseVersion builds a table version whose every field has its longest
// encoding, with n objects.
func worstCaseVersion(n int) TableVersion {
	v := TableVersion{
		Table:     strings.Repeat("t", MaxTableNameLen),
		ID:        versionA,
		CreatedAt: sampleTime,
		Op:        "o" + strings.Repeat("p", MaxOpLen-1),
	}
	for i := 0; i < n; i++ {
		var id ulid.ULID
		id[0] = 0x7f
		id[14], id[15] = byte(i>>8)+1, byte(i)
		v.Objects = append(v.Objects, ObjectEntry{ID: id, Size: 1<<63 - 1, SHA256: sampleSHA})
	}
	return v
}

func TestMaxObjectsPerVersion_WorstCaseFitsAndOneMoreIsTooLarge(t *testing.T) {
	b, err := EncodeTableVersion(worstCaseVersion(MaxObjectsPerVersion))
	if err != nil {
		t.Fatalf("worst case at the limit: %v", err)
	}
	if len(b) > MaxObjectSize {
		t.Fatalf("worst case is %d bytes, over %d", len(b), MaxObjectSize)
	}
	// The bound is tight: one more worst-case entry would not fit.
	if len(b)+maxObjectEntryLen <= MaxObjectSize {
		t.Fatalf("limit %d is loose: %d bytes leave room for another %d-byte entry", MaxObjectsPerVersion, len(b), maxObjectEntryLen)
	}
	_, err = EncodeTableVersion(worstCaseVersion(MaxObjectsPerVersion + 1))
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.What != "objects" || tl.Limit != int64(MaxObjectsPerVersion) {
		t.Fatalf("error %v, want TooLargeError on objects", err)
	}
}

func TestEncodeCommit_OverMaxObjectSize_IsTooLarge(t *testing.T) {
	c := sampleRootCommit()
	for i := 0; i < 2000; i++ {
		var v ulid.ULID
		v[15] = 1
		c.Pins[strings.Repeat("p", 40)+"_"+strings.Repeat("x", i%10)+itoa3(i)] = v
	}
	_, err := EncodeCommit(c)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("error %v, want ErrTooLarge", err)
	}
}

func itoa3(i int) string {
	return string([]byte{byte('0' + i/1000%10), byte('0' + i/100%10), byte('0' + i/10%10), byte('0' + i%10)})
}

func TestLineage_ForkAppendAndMerge(t *testing.T) {
	root := sampleRootCommit()
	mainHead := Commit{ID: CommitID{Tree: treeMain, Seq: 7}, Lineage: map[ulid.ULID]int64{}}

	fork := Lineage(treeFeature, mainHead)
	if !reflect.DeepEqual(fork, map[ulid.ULID]int64{treeMain: 7}) {
		t.Fatalf("fork lineage = %v", fork)
	}
	forkCommit := Commit{ID: CommitID{Tree: treeFeature, Seq: 0}, Lineage: fork}
	appended := Lineage(treeFeature, forkCommit)
	if !reflect.DeepEqual(appended, fork) {
		t.Fatalf("append lineage = %v, want parent's %v", appended, fork)
	}
	// other forked from feature at seq 0, then main merges other's seq 2:
	// main's own tree drops out, feature and other come in.
	otherHead := Commit{ID: CommitID{Tree: treeOther, Seq: 2}, Lineage: map[ulid.ULID]int64{treeFeature: 0, treeMain: 7}}
	merged := Lineage(treeMain, Commit{ID: CommitID{Tree: treeMain, Seq: 9}, Lineage: map[ulid.ULID]int64{treeFeature: 5}}, otherHead)
	want := map[ulid.ULID]int64{treeFeature: 5, treeOther: 2}
	if !reflect.DeepEqual(merged, want) {
		t.Fatalf("merge lineage = %v, want %v", merged, want)
	}
	if got := Lineage(treeMain); len(got) != 0 || root.Lineage == nil {
		t.Fatalf("root lineage = %v, want empty", got)
	}
}
