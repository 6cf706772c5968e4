package graph

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
)

// readUploadRecord reads and decodes the upload record of table's object id.
func readUploadRecord(t *testing.T, s storage.Store, table string, id ulid.ULID) format.Upload {
	t.Helper()
	obj, err := s.Get(context.Background(), format.UploadKey("sales", table, id))
	if err != nil {
		t.Fatalf("read the upload record of %s: %v", id, err)
	}
	rec, err := format.DecodeUpload(obj.Body)
	if err != nil {
		t.Fatalf("decode the upload record of %s: %v", id, err)
	}
	return rec
}

// smallParts are UploadOptions for a multipart upload of parts the backend's
// minimum size (at least 64 KiB), one in flight.
func smallParts(s storage.Store) (UploadOptions, int64) {
	m, _ := storage.AsMultipart(s)
	partSize := max(m.MultipartLimits().MinPartSize, 64<<10)
	return UploadOptions{Threshold: 1024, PartSize: partSize, Concurrency: 1}, partSize
}

// crashUpload runs an upload of three parts that stops the way a crashed writer
// does: its second part is refused and so is every abort, so its upload stays
// with the first part stored. With loseCreate the first create's answer is lost,
// and the retried create starts a second upload: the first one's id is never known.
func crashUpload(t *testing.T, s *faults.Store, table string, id ulid.ULID, loseCreate bool) {
	t.Helper()
	opts, partSize := smallParts(s)
	var removes []func()
	if loseCreate {
		removes = append(removes, s.Add(faults.Rule{Name: "lost-create", Op: faults.OpCreateMultipart, Mode: faults.ApplyLoseAnswer, Times: 1}))
	}
	removes = append(removes,
		s.Add(faults.Rule{Name: "crash", Op: faults.OpUploadPart, Mode: faults.Refuse, Status: 403, Skip: 1}),
		s.Add(faults.Rule{Name: "no-abort", Op: faults.OpAbortMultipart, Mode: faults.Refuse, Status: 403}))
	size := 2*partSize + 100
	_, err := UploadObject(context.Background(), s, "sales", table, id, bytes.NewReader(patterned(size)), size, opts)
	for _, remove := range removes {
		remove()
	}
	if !errors.Is(err, storage.ErrRefused) {
		t.Fatalf("the crashing upload: %v, want its part refused", err)
	}
}

// The record is written put-if-absent before the upload is created, and names
// the upload before its first part is sent: two puts of the record are all a
// multipart write adds. The record stays after the upload completes.
func TestUploadObject_RecordsTheUploadBeforeCreatingIt_AndNamesItBeforeTheFirstPart(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		opts, partSize := smallParts(s)
		id := objID(7)
		size := 2*partSize + 100
		res, err := UploadObject(ctx, s, "sales", "big", id, bytes.NewReader(patterned(size)), size, opts)
		if err != nil || res.Parts != 3 || res.UploadID == "" {
			t.Fatalf("upload = %+v, %v", res, err)
		}
		recKey := format.UploadKey("sales", "big", id)
		var order []string
		for _, r := range s.Requests() {
			switch {
			case r.Key == recKey:
				order = append(order, string(r.Op)+" record")
			case r.Op == faults.OpCreateMultipart || r.Op == faults.OpUploadPart && len(order) > 0 && order[len(order)-1] != "upload_part":
				order = append(order, string(r.Op))
			}
		}
		if want := []string{"put record", "create_multipart", "put record", "upload_part"}; !slices.Equal(order, want) {
			t.Fatalf("requests in order %v, want %v", order, want)
		}
		if c := s.CountMatching(faults.Rule{KeyPrefix: format.UploadsPrefix("sales")}); c.Attempted != 2 {
			t.Fatalf("%d requests for the record, want 2 puts", c.Attempted)
		}
		rec := readUploadRecord(t, s, "big", id)
		if rec.ObjectKey != format.ObjectKey("sales", "big", id) || rec.UploadID != res.UploadID || rec.CreatedAt.IsZero() {
			t.Fatalf("record %+v after upload %s", rec, res.UploadID)
		}
		// A small object is one put: no record.
		if _, err := UploadObject(ctx, s, "sales", "big", objID(8), bytes.NewReader(patterned(10)), 10, opts); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Head(ctx, format.UploadKey("sales", "big", objID(8))); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("record of a one-put object: %v", err)
		}
	})
}

// A record the store refuses fails the write before any upload exists.
func TestUploadObject_RecordRefused_StartsNoUpload(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		opts, partSize := smallParts(s)
		s.Add(faults.Rule{Name: "no-record", Op: faults.OpPut, KeyPrefix: format.UploadsPrefix("sales"), Mode: faults.Refuse, Status: 403})
		size := 2*partSize + 100
		_, err := UploadObject(context.Background(), s, "sales", "big", objID(9), bytes.NewReader(patterned(size)), size, opts)
		if !errors.Is(err, storage.ErrRefused) {
			t.Fatalf("upload without its record: %v, want refused", err)
		}
		if c := s.Count(faults.OpCreateMultipart); c.Attempted != 0 {
			t.Fatalf("%d creates, want none", c.Attempted)
		}
	})
}

// A writer that crashed mid-upload, after a create whose answer was lost, left
// two uploads of its object key and a record naming the second. On a server
// that lists uploads only for an exact key, listing the graph's prefix finds
// neither; the record does. A record younger than the window is not listed;
// a dry reclaim finds both uploads and changes nothing; a reclaim with abort
// aborts both and deletes the record. Nothing of the graph is left, and an
// upload outside it is untouched.
func TestReclaimUpload_CrashedWriter_ExactKeyListing_AbortsEveryUploadOfTheKeyAndRemovesTheRecord(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		m, _ := storage.AsMultipart(s)
		id := objID(11)
		key := format.ObjectKey("sales", "big", id)
		crashUpload(t, s, "big", id, true)
		if _, err := m.CreateMultipart(ctx, "landing/not-graft"); err != nil {
			t.Fatal(err)
		}
		ups := uploadsUnder(t, m, "sales/")
		if len(ups) != 2 || ups[0].Key != key || ups[1].Key != key {
			t.Fatalf("uploads after the crash = %+v, want two of %s", ups, key)
		}
		if rec := readUploadRecord(t, s, "big", id); !slices.ContainsFunc(ups, func(u storage.Upload) bool { return u.UploadID == rec.UploadID }) {
			t.Fatalf("record %+v names none of %+v", rec, ups)
		}

		s.SetMultipartListing(faults.ListExactKeyUploads)
		if got := uploadsUnder(t, m, "sales/tables/"); len(got) != 0 {
			t.Fatalf("exact-key listing of the tables prefix = %+v, want nothing", got)
		}
		if young, err := UploadRecords(ctx, s, "sales", time.Now().Add(-time.Hour)); err != nil || len(young) != 0 {
			t.Fatalf("records older than an hour = %+v, %v; want none", young, err)
		}
		later := time.Now().Add(time.Hour)
		recs, err := UploadRecords(ctx, s, "sales", later)
		if err != nil || len(recs) != 1 {
			t.Fatalf("records = %+v, %v; want one", recs, err)
		}
		if r := recs[0]; r.Key != format.UploadKey("sales", "big", id) || r.Table != "big" || r.Object != id || r.ObjectKey != key || r.Modified.IsZero() {
			t.Fatalf("record = %+v", r)
		}
		dry, err := ReclaimUpload(ctx, s, recs[0], later, false)
		if err != nil || len(dry.Uploads) != 2 || dry.Aborted != 0 || dry.Removed || s.Count(faults.OpAbortMultipart).Attempted != 3 {
			t.Fatalf("dry reclaim = %+v, %v, %d aborts sent (3 by the crash)", dry, err, s.Count(faults.OpAbortMultipart).Attempted)
		}
		got, err := ReclaimUpload(ctx, s, recs[0], later, true)
		if err != nil || len(got.Uploads) != 2 || got.Aborted != 2 || !got.Removed {
			t.Fatalf("reclaim = %+v, %v; want both uploads aborted and the record removed", got, err)
		}

		s.SetMultipartListing(faults.ListAllUploads)
		if left := uploadsUnder(t, m, "sales/"); len(left) != 0 {
			t.Fatalf("uploads left under the graph: %+v", left)
		}
		if _, err := s.Head(ctx, recs[0].Key); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("the record after the reclaim: %v", err)
		}
		if again, err := ReclaimUpload(ctx, s, recs[0], later, true); err != nil || len(again.Uploads) != 0 || again.Removed {
			t.Fatalf("reclaim of a record gone = %+v, %v; want nothing done", again, err)
		}
		if other := uploadsUnder(t, m, "landing/"); len(other) != 1 {
			t.Fatalf("uploads outside the graph = %+v, want the one left alone", other)
		}
	})
}

// Where the store cannot list uploads at all, the recorded upload is aborted
// (an upload whose create answer was lost cannot be found there), and the
// record of a completed upload is deleted without touching its object.
func TestReclaimUpload_ListingUnsupported_AbortsTheRecordedUpload_KeepsACompletedObject(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		m, _ := storage.AsMultipart(s)
		crashed, done := objID(12), objID(13)
		crashUpload(t, s, "big", crashed, false)
		opts, partSize := smallParts(s)
		size := 2*partSize + 100
		if _, err := UploadObject(ctx, s, "sales", "big", done, bytes.NewReader(patterned(size)), size, opts); err != nil {
			t.Fatal(err)
		}
		recorded := readUploadRecord(t, s, "big", crashed).UploadID

		s.SetMultipartListing(faults.ListUploadsUnsupported)
		later := time.Now().Add(time.Hour)
		recs, err := UploadRecords(ctx, s, "sales", later)
		if err != nil || len(recs) != 2 || recs[0].Object != crashed || recs[1].Object != done {
			t.Fatalf("records = %+v, %v", recs, err)
		}
		got, err := ReclaimUpload(ctx, s, recs[0], later, true)
		if err != nil || len(got.Uploads) != 1 || got.Uploads[0].UploadID != recorded || got.Aborted != 1 || !got.Removed {
			t.Fatalf("reclaim of the crashed upload = %+v, %v; want upload %s aborted", got, err, recorded)
		}
		got, err = ReclaimUpload(ctx, s, recs[1], later, true)
		if err != nil || len(got.Uploads) != 0 || !got.Removed {
			t.Fatalf("reclaim of the completed upload = %+v, %v; want only the record removed", got, err)
		}
		s.SetMultipartListing(faults.ListAllUploads)
		if left := uploadsUnder(t, m, "sales/"); len(left) != 0 {
			t.Fatalf("uploads left: %+v", left)
		}
		if obj, err := s.Get(ctx, format.ObjectKey("sales", "big", done)); err != nil || int64(len(obj.Body)) != size {
			t.Fatalf("the completed object after its record went: %d bytes, %v", len(obj.Body), err)
		}
		if again, err := UploadRecords(ctx, s, "sales", later); err != nil || len(again) != 0 {
			t.Fatalf("records left = %+v, %v", again, err)
		}
	})
}

// A record that does not decode (another format version) or names another
// object than its key is left alone, with whatever uploads its key has.
func TestReclaimUpload_UnreadableRecord_LeftAlone(t *testing.T) {
	s := faults.Wrap(newStore(t))
	ctx := context.Background()
	m, _ := storage.AsMultipart(s)
	newer, other := objID(14), objID(15)
	if _, err := m.CreateMultipart(ctx, format.ObjectKey("sales", "big", newer)); err != nil {
		t.Fatal(err)
	}
	body, err := format.EncodeUpload(format.Upload{ObjectKey: format.ObjectKey("sales", "big", newer), CreatedAt: t0})
	if err != nil {
		t.Fatal(err)
	}
	otherFormat := bytes.Replace(body, []byte(`"format":3`), []byte(`"format":4`), 1)
	elsewhere, err := format.EncodeUpload(format.Upload{ObjectKey: format.ObjectKey("sales", "big", objID(16)), CreatedAt: t0})
	if err != nil {
		t.Fatal(err)
	}
	for key, b := range map[string][]byte{format.UploadKey("sales", "big", newer): otherFormat, format.UploadKey("sales", "big", other): elsewhere,
		format.UploadsPrefix("sales") + "big/notes.txt": []byte("not a record")} {
		if _, err := s.Put(ctx, key, b, storage.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
	}
	later := time.Now().Add(time.Hour)
	recs, err := UploadRecords(ctx, s, "sales", later)
	if err != nil || len(recs) != 2 {
		t.Fatalf("records = %+v, %v; want the two record keys", recs, err)
	}
	for _, rec := range recs {
		got, err := ReclaimUpload(ctx, s, rec, later, true)
		if err != nil || got.Unreadable == nil || got.Removed || got.Aborted != 0 {
			t.Fatalf("reclaim of %s = %+v, %v; want it left alone as unreadable", rec.Key, got, err)
		}
		if rec.Object == newer && !errors.Is(got.Unreadable, format.ErrUnsupportedFormat) {
			t.Fatalf("a record of format 3: %v, want ErrUnsupportedFormat", got.Unreadable)
		}
	}
	if ups := uploadsUnder(t, m, "sales/"); len(ups) != 1 {
		t.Fatalf("uploads = %+v, want the unreadable record's left", ups)
	}
	if c := s.Count(faults.OpDelete); c.Attempted != 0 {
		t.Fatalf("%d deletes, want none", c.Attempted)
	}
}
