package graph

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/memstore"
)

// objID returns a distinct, increasing object ULID for i.
func objID(i int) ulid.ULID {
	var id ulid.ULID
	id[0] = 1
	id[10], id[11], id[12], id[13], id[14], id[15] = byte(i>>40), byte(i>>32), byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
	return id
}

func objEntry(i int) format.ManifestEntry {
	id := objID(i)
	return format.ManifestEntry{Name: id.String(), Object: id, Size: int64(i%1000 + 1), SHA256: sha64}
}

func vid(n int) ulid.ULID {
	var id ulid.ULID
	id[0], id[1] = 2, 1
	id[14], id[15] = byte(n>>8), byte(n)
	return id
}

func TestTableVersions_PutReadAppendDelete_OnEveryBackend(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		g, _ := mustInitGraph(t, s)
		var put []format.ManifestEntry
		var total int64
		for i := 0; i < 300; i++ {
			put = append(put, objEntry(i))
			total += objEntry(i).Size
		}
		p1, err := g.PutVersion(ctx, VersionSpec{Table: "events", VersionID: vid(1), Put: put, Time: t0, Op: "op-v1"})
		if err != nil {
			t.Fatal(err)
		}
		if p1.Version.Entries.IsInline() || p1.Added != 300 || p1.Version.Bytes != total {
			t.Fatalf("300 entries: inline %v, added %d, bytes %d (want %d)", p1.Version.Entries.IsInline(), p1.Added, p1.Version.Bytes, total)
		}
		v, err := g.Version(ctx, "events", vid(1))
		if err != nil || v.Len() != 300 || v.Bytes != total {
			t.Fatalf("read version: %+v, %v", v, err)
		}
		var n int
		if err := g.EachEntry(ctx, v, func(e format.ManifestEntry) error {
			if e != objEntry(n) {
				return fmt.Errorf("entry %d = %+v", n, e)
			}
			n++
			return nil
		}); err != nil || n != 300 {
			t.Fatalf("entries: %d, %v", n, err)
		}
		// Append 10, delete 2, replace 1.
		var more []format.ManifestEntry
		for i := 300; i < 310; i++ {
			more = append(more, objEntry(i))
		}
		replaced := objEntry(5)
		replaced.Size = 77
		more = append(more, replaced)
		p2, err := g.PutVersion(ctx, VersionSpec{Table: "events", VersionID: vid(2), Base: vid(1), Put: more,
			Delete: []string{objEntry(0).Name, objEntry(1).Name}, Time: t0, Op: "op-v2"})
		if err != nil {
			t.Fatal(err)
		}
		if p2.Added != 10 || p2.Removed != 2 || p2.Replaced != 1 || p2.Version.Entries.Len() != 308 {
			t.Fatalf("plan = added %d removed %d replaced %d, %d entries", p2.Added, p2.Removed, p2.Replaced, p2.Version.Entries.Len())
		}
		v2, _ := g.Version(ctx, "events", vid(2))
		if e, ok, _ := g.Entry(ctx, v2, objEntry(5).Name); !ok || e.Size != 77 {
			t.Fatalf("replaced entry = %+v %v", e, ok)
		}
		if _, ok, _ := g.Entry(ctx, v2, objEntry(0).Name); ok {
			t.Fatal("deleted entry still there")
		}
		want := total + 77 - objEntry(5).Size - objEntry(0).Size - objEntry(1).Size
		for i := 300; i < 310; i++ {
			want += objEntry(i).Size
		}
		if v2.Bytes != want {
			t.Fatalf("bytes = %d, want %d", v2.Bytes, want)
		}
		// Deleting a name the base lacks, or an external key in the graph's
		// own prefix, is invalid.
		if _, err := g.PlanVersion(ctx, VersionSpec{Table: "events", VersionID: vid(3), Base: vid(2), Delete: []string{"nope"}, Time: t0, Op: "op-v3"}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("delete absent: %v", err)
		}
		bad := format.ManifestEntry{Name: "x", External: "sales/tables/events/objects/" + objID(1).String(), Size: 1, ETag: `"e"`}
		if _, err := g.PlanVersion(ctx, VersionSpec{Table: "events", VersionID: vid(3), Put: []format.ManifestEntry{bad}, Time: t0, Op: "op-v3"}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("external under the graph prefix: %v", err)
		}
	})
}

// Appending costs what it appends, not the table: appending 100 entries to a table of 10,000 and
// to one of 100,000 writes the same chunks ± 1 and costs the same requests ±
// a few (the tree is one level taller).
func TestAppend100_FlatAt10kAnd100k(t *testing.T) {
	type cost struct {
		chunks, gets, puts int
		bytes              int
	}
	measure := func(n int) cost {
		ctx := context.Background()
		mem := memstore.New()
		s := faults.Wrap(mem)
		g, _ := mustInitGraph(t, s)
		var put []format.ManifestEntry
		for i := 0; i < n; i++ {
			put = append(put, objEntry(i))
		}
		if _, err := g.PutVersion(ctx, VersionSpec{Table: "events", VersionID: vid(1), Put: put, Time: t0, Op: "op-v1"}); err != nil {
			t.Fatal(err)
		}
		g2, _ := Open(s, "sales") // cold cache
		s.ResetCounts()
		var more []format.ManifestEntry
		for i := n; i < n+100; i++ {
			more = append(more, objEntry(i))
		}
		p, err := g2.PutVersion(ctx, VersionSpec{Table: "events", VersionID: vid(2), Base: vid(1), Put: more, Time: t0, Op: "op-v2"})
		if err != nil {
			t.Fatal(err)
		}
		c := cost{chunks: len(p.Chunks), gets: s.Count(faults.OpGet).Attempted, puts: s.Count(faults.OpPut).Attempted}
		for _, ch := range p.Chunks {
			c.bytes += len(ch.Body)
		}
		return c
	}
	small, large := measure(10000), measure(100000)
	t.Logf("append 100: 10k entries %+v; 100k entries %+v", small, large)
	if d := large.chunks - small.chunks; d < -1 || d > 1 {
		t.Fatalf("chunks written: %d at 10k, %d at 100k; want equal ± 1", small.chunks, large.chunks)
	}
	if large.gets > small.gets+3 || large.puts > small.puts+2 {
		t.Fatalf("requests grow with the table: %+v vs %+v", small, large)
	}
	if large.bytes > 3*small.bytes+64<<10 {
		t.Fatalf("bytes written grow with the table: %d vs %d", small.bytes, large.bytes)
	}
}

func TestImportEntries_ZeroCopyAndCheck(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		g, _ := mustInitGraph(t, s)
		if _, err := s.Put(ctx, "landing/day1/a.parquet", []byte("aaaa"), storage.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, "landing/day1/b.parquet", []byte("bb"), storage.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		s.ResetCounts()
		entries, err := ImportEntries(ctx, s, "sales", []ImportRef{{Key: "landing/day1/b.parquet", Name: "b.parquet"}, {Key: "landing/day1/a.parquet"}})
		if err != nil {
			t.Fatal(err)
		}
		// A HEAD of each object, and one of the graph record at each prefix the two keys
		// share that could be a graph's (landing/, landing/day1/): no graph owns them.
		if c := s.Counts(); c[faults.OpHead].Attempted != 4 || c[faults.OpGet].Attempted != 0 || c[faults.OpPut].Attempted != 0 {
			t.Fatalf("import requests: %+v, want 4 heads only", c)
		}
		if len(entries) != 2 || entries[1].Name != "landing/day1/a.parquet" || entries[1].Size != 4 || entries[1].ETag == "" || !entries[1].IsExternal() {
			t.Fatalf("entries = %+v", entries)
		}
		p, err := g.PutVersion(ctx, VersionSpec{Table: "raw", VersionID: vid(1), Put: entries, Time: t0, Op: "op-import"})
		if err != nil || p.Version.Bytes != 6 {
			t.Fatalf("version of imports: %+v, %v", p.Version, err)
		}
		for _, e := range entries {
			if err := CheckExternal(ctx, s, e); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Put(ctx, "landing/day1/a.parquet", []byte("changed"), storage.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := CheckExternal(ctx, s, entries[1]); !errors.Is(err, ErrExternalChanged) {
			t.Fatalf("changed external: %v", err)
		}
		if _, err := ImportEntries(ctx, s, "sales", []ImportRef{{Key: "landing/missing"}}); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("import of a missing key: %v", err)
		}
		if _, err := ImportEntries(ctx, s, "sales", []ImportRef{{Key: "sales/tables/raw/objects/" + objID(1).String()}}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("import of a graft key: %v", err)
		}
	})
}

func patterned(n int64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131 + i/4099)
	}
	return b
}

// A multipart upload of a dozen parts (the smallest the backend allows),
// read back whole with its checksum; an upload that fails part-way is
// aborted, leaving no incomplete upload, only its record for cleanup.
func TestUploadObject_MultipartDozenParts_AbortOnFailure_LeavesOnlyTheRecord(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		m, _ := storage.AsMultipart(s)
		partSize := max(m.MultipartLimits().MinPartSize, 64<<10)
		size := 11*partSize + partSize/2 // twelve parts
		body := patterned(size)
		id := objID(42)
		res, err := UploadObject(ctx, s, "sales", "big", id, bytes.NewReader(body), size, UploadOptions{Threshold: 1024, PartSize: partSize, Concurrency: 3})
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(body)
		if res.Parts != 12 || res.Entry.SHA256 != hex.EncodeToString(sum[:]) || res.Entry.Size != size {
			t.Fatalf("upload = %d parts, entry %+v", res.Parts, res.Entry)
		}
		obj, err := s.Get(ctx, format.ObjectKey("sales", "big", id))
		if err != nil || !bytes.Equal(obj.Body, body) {
			t.Fatalf("read back %d bytes, %v", len(obj.Body), err)
		}
		if c := s.Count(faults.OpUploadPart); c.Attempted != 12 {
			t.Fatalf("%d part uploads, want 12", c.Attempted)
		}
		// A part refused: the upload is aborted, nothing left but its record.
		remove := s.Add(faults.Rule{Name: "refuse-part", Op: faults.OpUploadPart, Mode: faults.Refuse, Status: 403, Skip: 4, Times: 1})
		_, err = UploadObject(ctx, s, "sales", "big", objID(43), bytes.NewReader(body), size, UploadOptions{Threshold: 1024, PartSize: partSize})
		remove()
		if !errors.Is(err, storage.ErrRefused) {
			t.Fatalf("upload with a refused part: %v", err)
		}
		if ups := uploadsUnder(t, m, "sales/"); len(ups) != 0 {
			t.Fatalf("incomplete uploads after an aborted one: %+v", ups)
		}
		if _, err := s.Head(ctx, format.ObjectKey("sales", "big", objID(43))); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("object of a failed upload: %v", err)
		}
		if rec := readUploadRecord(t, s, "big", objID(43)); rec.UploadID == "" {
			t.Fatalf("the failed upload's record %+v names no upload", rec)
		}
	})
}

func uploadsUnder(t *testing.T, m storage.Multipart, prefix string) []storage.Upload {
	t.Helper()
	var out []storage.Upload
	if err := storage.ListAllMultipart(context.Background(), m, prefix, func(u storage.Upload) error { out = append(out, u); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// An answer lost on the complete is settled by HEAD; the object is there.
func TestUploadObject_LostCompleteAnswer_IsSettled(t *testing.T) {
	s := faults.Wrap(memstore.New())
	s.Add(faults.Rule{Name: "lost", Op: faults.OpCompleteMultipart, Mode: faults.ApplyLoseAnswer, Times: 1})
	body := patterned(5000)
	res, err := UploadObject(context.Background(), s, "sales", "t", objID(1), bytes.NewReader(body), 5000, UploadOptions{Threshold: 1000, PartSize: 1000})
	if err != nil || res.Parts != 5 {
		t.Fatalf("upload = %+v, %v", res, err)
	}
	if c := s.Count(faults.OpCompleteMultipart); c.Attempted != 1 {
		t.Fatalf("%d completes, want 1 (the HEAD settles it)", c.Attempted)
	}
}

// On MinIO a complete sent again after the first landed answers 412, as if another
// object held the key: the uploader settles it by HEAD like any unknown answer, and the
// upload is done. Here the first complete's answer is lost and the object is not yet
// readable on the first HEAD, so the complete is sent twice.
func TestUploadObject_MinIORepeatedCompleteAnswers412_IsSettledAsDone(t *testing.T) {
	s := faults.Wrap(serverStore(t, testenv.MinIO(t)))
	id := objID(3)
	key := format.ObjectKey("sales", "t", id)
	s.Add(faults.Rule{Name: "lost", Op: faults.OpCompleteMultipart, Mode: faults.ApplyLoseAnswer, Times: 1})
	s.Add(faults.Rule{Name: "lagging", Op: faults.OpHead, KeyPrefix: key, Mode: faults.Refuse, Status: 404, Times: 1})
	const part = 5 << 20 // MinIO's smallest part
	body := patterned(part + 1000)
	res, err := UploadObject(context.Background(), s, "sales", "t", id, bytes.NewReader(body), int64(len(body)),
		UploadOptions{Threshold: 1 << 20, PartSize: part})
	if err != nil || res.Parts != 2 {
		t.Fatalf("upload = %+v, %v; want done in 2 parts", res, err)
	}
	if c := s.Count(faults.OpCompleteMultipart); c.Attempted != 2 {
		t.Fatalf("%d completes, want 2 (the second answered 412)", c.Attempted)
	}
	obj, err := s.Get(context.Background(), key)
	if err != nil || !bytes.Equal(obj.Body, body) {
		t.Fatalf("the object: %d bytes, %v; want the uploaded %d", len(obj.Body), err, len(body))
	}
}

// A complete answered before the object is readable (versitygw, a re-sent
// complete of a big object) is confirmed by reading it back: the upload is
// done only once our size is at the key, and one that never appears is
// ambiguous after a bounded number of reads, never done.
func TestUploadObject_CompleteAnsweredBeforeTheObjectIsReadable_ConfirmedByReadBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		absent int
		done   bool
	}{{"readable on the third read", 2, true}, {"never readable", 1000, false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := faults.Wrap(memstore.New())
			key := format.ObjectKey("sales", "t", objID(2))
			s.Add(faults.Rule{Name: "lagging", Op: faults.OpHead, KeyPrefix: key, Mode: faults.Refuse, Status: 404, Times: tc.absent})
			body := patterned(5000)
			res, err := UploadObject(context.Background(), s, "sales", "t", objID(2), bytes.NewReader(body), 5000, UploadOptions{Threshold: 1000, PartSize: 1000})
			heads := s.Count(faults.OpHead).Attempted
			switch {
			case tc.done && (err != nil || res.Parts != 5 || heads != 3):
				t.Fatalf("upload = %+v, %v after %d reads; want done on the third read", res, err, heads)
			case !tc.done && (!errors.Is(err, storage.ErrAmbiguous) || heads != confirmReads):
				t.Fatalf("upload = %+v, %v after %d reads; want ambiguous after %d", res, err, heads, confirmReads)
			}
		})
	}
}

func TestPartSizeFor_StaysWithinPartCountAndMinimum(t *testing.T) {
	lim := storage.S3MultipartLimits
	if ps := PartSizeFor(5<<40, 0, lim); (5<<40+ps-1)/ps > int64(lim.MaxParts) || ps > lim.MaxPartSize {
		t.Fatalf("5 TiB: part size %d", ps)
	}
	if ps := PartSizeFor(100<<20, 1<<20, lim); ps != lim.MinPartSize {
		t.Fatalf("1 MiB parts on S3: %d", ps)
	}
	if ps := PartSizeFor(100<<20, 8<<20, lim); ps != 8<<20 {
		t.Fatalf("8 MiB parts: %d", ps)
	}
}

// A name a version spec lists twice — put twice, or put and deleted — is
// invalid, named at its later listing, whatever order the names come in;
// names listed once in any order plan the same version.
func TestPlanVersion_NameListedTwice_NamedAtItsLaterListing(t *testing.T) {
	ctx := context.Background()
	g, _ := mustInitGraph(t, memstore.New())
	spec := func(put []int, del ...int) VersionSpec {
		s := VersionSpec{Table: "events", VersionID: vid(1), Time: t0, Op: "op-v1"}
		for _, i := range put {
			s.Put = append(s.Put, objEntry(i))
		}
		for _, i := range del {
			s.Delete = append(s.Delete, objEntry(i).Name)
		}
		return s
	}
	for _, c := range []struct {
		spec  VersionSpec
		field string
	}{
		{spec([]int{1, 2, 1}), "Put[2]"},
		{spec([]int{3, 1, 2, 3}), "Put[3]"},
		{spec([]int{2, 1}, 2), "Delete[0]"},
		{spec([]int{1}, 3, 2, 3), "Delete[2]"},
	} {
		_, err := g.PlanVersion(ctx, c.spec)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Field != c.field {
			t.Errorf("put %d, delete %v: %v; want invalid %s", len(c.spec.Put), c.spec.Delete, err, c.field)
		}
	}
	inOrder, err := g.PlanVersion(ctx, spec([]int{1, 2, 3}))
	if err != nil {
		t.Fatal(err)
	}
	shuffled, err := g.PlanVersion(ctx, spec([]int{3, 1, 2}))
	if err != nil || !bytes.Equal(shuffled.Body, inOrder.Body) {
		t.Fatalf("the same names in another order: %v, a different version", err)
	}
}
