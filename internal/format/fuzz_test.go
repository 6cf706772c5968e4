package format

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/storage"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/: valid objects (the golden
// encodings) and invalid ones (each strictness violation). CI runs every
// target briefly with -fuzz.

// checkRoundTrip asserts the decode properties on arbitrary input: decoding
// never panics and fails only with a typed error; whatever decodes
// re-encodes to bytes that decode to an equal value; and re-encoding is a
// fixed point.
func checkRoundTrip[T any](t *testing.T, b []byte, decode func([]byte) (T, error), encode func(T) ([]byte, error)) {
	t.Helper()
	v, err := decode(b)
	if err != nil {
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupportedFormat) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrInvalidName) {
			t.Fatalf("decode returned an untyped error: %v", err)
		}
		return
	}
	b1, err := encode(v)
	if err != nil {
		t.Fatalf("a decoded value does not re-encode: %v\ninput %q", err, b)
	}
	v1, err := decode(b1)
	if err != nil {
		t.Fatalf("re-encoded bytes do not decode: %v\n%s", err, b1)
	}
	if !reflect.DeepEqual(v, v1) {
		t.Fatalf("decode(encode(decode(b))) = %+v, want %+v", v1, v)
	}
	b2, err := encode(v1)
	if err != nil || !bytes.Equal(b1, b2) {
		t.Fatalf("encoding is not stable: %v\n%s\n%s", err, b1, b2)
	}
}

func FuzzDecodeGraph(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, DecodeGraph, EncodeGraph) })
}

func FuzzDecodeTableVersion(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, DecodeTableVersion, EncodeTableVersion) })
}

func FuzzDecodeBranchRef(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, DecodeBranchRef, EncodeBranchRef) })
}

func FuzzDecodeTag(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, DecodeTag, EncodeTag) })
}

func FuzzDecodeUpload(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, DecodeUpload, EncodeUpload) })
}

func FuzzDecodeCommit(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		checkRoundTrip(t, b, DecodeCommit, func(c Commit) ([]byte, error) {
			_, out, err := SealCommit(c)
			return out, err
		})
		// A commit that decodes is exactly its canonical bytes.
		if _, err := DecodeCommit(b); err == nil {
			c, _ := DecodeCommit(b)
			if _, out, _ := SealCommit(c); !bytes.Equal(out, b) {
				t.Fatalf("decoded commit is not its canonical bytes")
			}
		}
	})
}

// chunk is a decoded chunk of either shape, for the chunk round trips.
type chunk[E any] struct {
	leaf []E
	node *MapNode
}

func chunkCodec[E any](m MapSpec[E]) (func([]byte) (chunk[E], error), func(chunk[E]) ([]byte, error)) {
	decode := func(b []byte) (chunk[E], error) {
		leaf, node, err := m.DecodeChunk(b)
		return chunk[E]{leaf: leaf, node: node}, err
	}
	encode := func(c chunk[E]) ([]byte, error) {
		if c.node != nil {
			return m.EncodeNode(*c.node)
		}
		return m.EncodeLeaf(c.leaf)
	}
	return decode, encode
}

// checkChunk is checkRoundTrip on a chunk, and checks that the one-pass leaf
// reader accepts only leaves the strict decoder accepts, with the same entries,
// and every leaf graft writes.
func checkChunk[E any](t *testing.T, m MapSpec[E], b []byte) {
	dec, enc := chunkCodec(m)
	checkRoundTrip(t, b, dec, enc)
	fast, ok := m.readLeaf(b)
	strict, err := m.decodeLeafStrict(b)
	if ok && (err != nil || !reflect.DeepEqual(fast, strict)) {
		t.Fatalf("one-pass leaf reader: %+v; strict decoder: %+v, %v\ninput %q", fast, strict, err, b)
	}
	if err != nil {
		return
	}
	canonical, err := m.EncodeLeaf(strict)
	if err != nil {
		t.Fatal(err)
	}
	var entries []byte
	for i, e := range strict {
		if i > 0 {
			entries = append(entries, ',')
		}
		if entries, err = m.AppendEntry(entries, e); err != nil {
			t.Fatal(err)
		}
	}
	if joined := m.LeafOf(entries); !bytes.Equal(joined, canonical) {
		t.Fatalf("entries encoded one by one and joined:\n%s\nEncodeLeaf:\n%s", joined, canonical)
	}
	if fast, ok := m.readLeaf(canonical); !ok || !reflect.DeepEqual(fast, strict) {
		t.Fatalf("one-pass leaf reader refuses or misreads an encoded leaf: %v\n%s", ok, canonical)
	}
}

func FuzzDecodeManifestChunk(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkChunk(t, ManifestMap, b) })
}

func FuzzDecodePinsChunk(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkChunk(t, PinsMap, b) })
}

func FuzzDecodeLineageChunk(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkChunk(t, LineageMap, b) })
}

// FuzzValidateBranchName checks that a valid logical name yields valid,
// well-shaped keys: its native name parses back to it, its ref key is a
// valid storage key under its listing prefix that parses back to the native
// name, and no segment of the ref or tag key is a directory of another key.
func FuzzValidateBranchName(f *testing.F) {
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateBranchName(name)
		if err != nil {
			var ne *NameError
			if !errors.As(err, &ne) || !errors.Is(err, ErrInvalidName) || ne.Name != name || ne.Reason == "" {
				t.Fatalf("invalid name %q: error %v is not a complete NameError", name, err)
			}
			return
		}
		if err := ValidateTagName(name); err != nil {
			t.Fatalf("valid branch name %q is not a valid tag name: %v", name, err)
		}
		native := NativeName(name, treeFeature)
		logical, tree, err := ParseNative(native)
		if err != nil || logical != name || tree != treeFeature {
			t.Fatalf("ParseNative(%q) = %q, %s, %v", native, logical, tree, err)
		}
		key := BranchRefKey("g", native)
		if err := storage.ValidateKey(key); err != nil {
			t.Fatalf("ref key %q is not a valid storage key: %v", key, err)
		}
		if !strings.HasPrefix(key, BranchRefPrefix("g", name)) {
			t.Fatalf("ref key %q not under its listing prefix", key)
		}
		if got, err := ParseBranchRefKey("g", key); err != nil || got != native {
			t.Fatalf("ParseBranchRefKey(%q) = %q, %v", key, got, err)
		}
		tagKey := TagKey("g", name)
		if err := storage.ValidateKey(tagKey); err != nil {
			t.Fatalf("tag key %q is not a valid storage key: %v", tagKey, err)
		}
		for _, k := range []string{key, tagKey} {
			for _, seg := range strings.Split(k, "/")[:strings.Count(k, "/")] {
				if strings.HasSuffix(strings.ToLower(seg), ".json") {
					t.Fatalf("key %q has a directory segment %q that could be another key's last segment", k, seg)
				}
			}
		}
	})
}

// FuzzValidateGraphName checks that a valid graph name yields valid keys.
func FuzzValidateGraphName(f *testing.F) {
	f.Fuzz(func(t *testing.T, name string) {
		if err := ValidateGraphName(name); err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		for _, k := range []string{GraphKey(name), CommitIDKey(name, CommitID{Tree: treeMain, Digest: Digest{1}}), BranchRefKey(name, NativeName("main", treeMain))} {
			if err := storage.ValidateKey(k); err != nil {
				t.Fatalf("key %q invalid: %v", k, err)
			}
		}
	})
}

// FuzzParseCommitID checks that whatever parses is canonical: it prints back
// to the input and its key parses back to it.
func FuzzParseCommitID(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseCommitID(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if id.String() != s {
			t.Fatalf("ParseCommitID(%q).String() = %q", s, id.String())
		}
		if got, err := ParseCommitKey("g", CommitIDKey("g", id)); err != nil || got != id {
			t.Fatalf("commit key of %s parses to %v, %v", id, got, err)
		}
	})
}

// The seed corpora hold what their file names say: every valid-* seed
// decodes and every invalid-* seed fails with a typed error.
func TestFuzzCorpus_ValidSeedsDecodeAndInvalidSeedsFail(t *testing.T) {
	decoders := map[string]func([]byte) error{
		"FuzzDecodeGraph":         func(b []byte) error { _, err := DecodeGraph(b); return err },
		"FuzzDecodeTableVersion":  func(b []byte) error { _, err := DecodeTableVersion(b); return err },
		"FuzzDecodeCommit":        func(b []byte) error { _, err := DecodeCommit(b); return err },
		"FuzzDecodeBranchRef":     func(b []byte) error { _, err := DecodeBranchRef(b); return err },
		"FuzzDecodeTag":           func(b []byte) error { _, err := DecodeTag(b); return err },
		"FuzzDecodeManifestChunk": func(b []byte) error { _, _, err := ManifestMap.DecodeChunk(b); return err },
		"FuzzDecodePinsChunk":     func(b []byte) error { _, _, err := PinsMap.DecodeChunk(b); return err },
		"FuzzDecodeLineageChunk":  func(b []byte) error { _, _, err := LineageMap.DecodeChunk(b); return err },
	}
	for target, decode := range decoders {
		entries, err := os.ReadDir(filepath.Join("testdata", "fuzz", target))
		if err != nil {
			t.Fatal(err)
		}
		var valid, invalid int
		for _, e := range entries {
			raw, err := os.ReadFile(filepath.Join("testdata", "fuzz", target, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.SplitN(strings.TrimSpace(string(raw)), "\n", 2)
			if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") {
				t.Fatalf("%s/%s: not a corpus file", target, e.Name())
			}
			seed, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
			if err != nil {
				t.Fatalf("%s/%s: %v", target, e.Name(), err)
			}
			err = decode([]byte(seed))
			switch {
			case strings.HasPrefix(e.Name(), "valid-"):
				valid++
				if err != nil {
					t.Errorf("%s/%s: %v", target, e.Name(), err)
				}
			case strings.HasPrefix(e.Name(), "invalid-"):
				invalid++
				if err == nil {
					t.Errorf("%s/%s decoded, want an error", target, e.Name())
				}
			}
		}
		if valid == 0 || invalid == 0 {
			t.Errorf("%s: %d valid and %d invalid seeds, want some of each", target, valid, invalid)
		}
	}
}

// A manifest leaf over MaxObjectSize and within MaxChunkSize — as graft writes a big
// table's — is read by the one-pass reader, not only by the strict decoder.
func TestReadLeaf_ALeafOverMaxObjectSize_IsReadInOnePass(t *testing.T) {
	var entries []ManifestEntry
	for i := 0; i < 1500; i++ {
		entries = append(entries, ManifestEntry{Name: fmt.Sprintf("part-%05d.parquet", i), Object: ulid.ULID{1, byte(i >> 8), byte(i)},
			Size: int64(i), SHA256: strings.Repeat("ab", 32)})
	}
	b, err := ManifestMap.EncodeLeaf(entries)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) <= MaxObjectSize || len(b) > MaxChunkSize {
		t.Fatalf("leaf of %d bytes; want one over %d and within %d", len(b), MaxObjectSize, MaxChunkSize)
	}
	if got, ok := ManifestMap.readLeaf(b); !ok || !reflect.DeepEqual(got, entries) {
		t.Fatalf("one-pass reader: ok %v, %d entries; want the %d encoded", ok, len(got), len(entries))
	}
}
