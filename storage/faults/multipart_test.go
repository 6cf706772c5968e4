package faults_test

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
)

// A multipart complete whose answer is lost was applied: the object exists
// and the upload is gone, though the caller saw ambiguous. A part that failed
// before send left nothing; re-sending it completes the upload.
func TestMultipart_LostCompleteIsApplied_FailedPartIsResent(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			w := faults.Wrap(b.open(t))
			m, ok := storage.AsMultipart(w)
			if !ok {
				t.Fatal("wrapper over a multipart store has no multipart")
			}
			const key = "g/tables/t/objects/big"
			id, err := m.CreateMultipart(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			size := max(m.MultipartLimits().MinPartSize, 1024)
			one := bytes.Repeat([]byte{1}, int(size))
			w.Add(faults.Rule{Name: "part", Op: faults.OpUploadPart, Mode: faults.FailBeforeSend, Times: 1})
			_, err = m.UploadPart(ctx, key, id, 1, bytes.NewReader(one), size)
			requireInjected(t, err, faults.OpUploadPart, key, storage.CodeAmbiguous, 0, "part")
			p1, err := m.UploadPart(ctx, key, id, 1, bytes.NewReader(one), size)
			if err != nil {
				t.Fatal(err)
			}
			p2, err := m.UploadPart(ctx, key, id, 2, bytes.NewReader([]byte("end")), 3)
			if err != nil {
				t.Fatal(err)
			}
			w.Add(faults.Rule{Name: "complete", Op: faults.OpCompleteMultipart, Mode: faults.ApplyLoseAnswer, Times: 1})
			_, err = m.CompleteMultipart(ctx, key, id, []storage.Part{p1, p2})
			requireInjected(t, err, faults.OpCompleteMultipart, key, storage.CodeAmbiguous, 0, "complete")
			info, err := w.Head(ctx, key)
			if err != nil || info.Size != size+3 {
				t.Fatalf("head after a lost complete = %+v, %v; want %d bytes", info, err, size+3)
			}
			// A re-issued complete of a completed upload: versitygw answers
			// success again, the others that the upload is gone.
			_, err = m.CompleteMultipart(ctx, key, id, []storage.Part{p1, p2})
			if err != nil && storage.CodeOf(err) != storage.CodeNotFound {
				t.Fatalf("re-issued complete: err = %v, want success or not found (the upload is done)", err)
			}
			if c := w.Count(faults.OpCompleteMultipart); c.Attempted != 2 || c.Faults[faults.ApplyLoseAnswer] != 1 {
				t.Fatalf("complete tally = %+v", c)
			}
		})
	}
}

// Under ListExactKeyUploads a listing answers only for a prefix that is one
// exact key, and only that key's uploads (MinIO's rule): a graph's prefix, a
// table's, or a key with a longer sibling lists nothing else; no prefix lists
// every upload, as on MinIO. Under
// ListUploadsUnsupported every listing is a 501, as from a server without the
// call; the uploads are still there for the default listing.
func TestMultipartListing_ExactKeyOnly_AndUnsupported_OnEveryBackend(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			w := faults.Wrap(b.open(t))
			m, _ := storage.AsMultipart(w)
			ids := createUploads(t, m, exactKey, exactKey, longerKey)
			if got := uploadsListed(t, m, "g/", 0); len(got) != 3 {
				t.Fatalf("the default listing of g/ = %v, want all 3 uploads", got)
			}
			w.SetMultipartListing(faults.ListExactKeyUploads)
			for _, prefix := range []string{"g/", "g/tables/t/objects/", "g/tables/t/objects/x"} {
				if got := uploadsListed(t, m, prefix, 0); len(got) != 0 {
					t.Fatalf("exact-key listing of %q = %v, want nothing", prefix, got)
				}
			}
			if got := uploadsListed(t, m, "", 0); len(got) != 3 {
				t.Fatalf("exact-key listing without a prefix = %v, want all 3 uploads", got)
			}
			// (versitygw orders one key's uploads by time, not by id.)
			want := []string{exactKey + " " + min(ids[0], ids[1]), exactKey + " " + max(ids[0], ids[1])}
			if got := uploadsListed(t, m, exactKey, 0); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
				t.Fatalf("exact-key listing of %q = %v, want %v", exactKey, got, want)
			}
			if got := uploadsListed(t, m, longerKey, 0); len(got) != 1 || got[0] != longerKey+" "+ids[2] {
				t.Fatalf("exact-key listing of %q = %v", longerKey, got)
			}
			w.SetMultipartListing(faults.ListUploadsUnsupported)
			_, err := m.ListMultipart(ctx, storage.ListMultipartOptions{Prefix: exactKey})
			requireInjected(t, err, faults.OpListMultipart, exactKey, storage.CodeUnavailable, 501, "multipart listing unsupported")
			w.SetMultipartListing(faults.ListAllUploads)
			if got := uploadsListed(t, m, "g/tables/", 0); len(got) != 3 {
				t.Fatalf("the default listing again = %v, want all 3 uploads", got)
			}
			if c := w.Count(faults.OpListMultipart); c.Sent != c.Attempted {
				t.Fatalf("listing tally = %+v: every listing reached the (emulated) server", c)
			}
			for i, k := range []string{exactKey, exactKey, longerKey} {
				if err := m.AbortMultipart(ctx, k, ids[i]); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// An exact key's uploads page one at a time, and the page after its last one
// is not truncated though uploads of a longer key follow. (On the local store:
// versitygw refuses the upload-id marker a second page needs.)
func TestMultipartListing_ExactKeyOnly_PagesWithinTheKey(t *testing.T) {
	w := faults.Wrap(openLocalFS(t))
	m, _ := storage.AsMultipart(w)
	ids := createUploads(t, m, exactKey, exactKey, longerKey, longerKey)
	w.SetMultipartListing(faults.ListExactKeyUploads)
	want := []string{exactKey + " " + min(ids[0], ids[1]), exactKey + " " + max(ids[0], ids[1])}
	if got := uploadsListed(t, m, exactKey, 1); !slices.Equal(got, want) {
		t.Fatalf("exact-key listing of %q one a page = %v, want %v", exactKey, got, want)
	}
	// Two pages with an upload, then the page that ends the key: three listings.
	if c := w.Count(faults.OpListMultipart); c.Attempted != 3 {
		t.Fatalf("%d listings, want 3", c.Attempted)
	}
}

const exactKey, longerKey = "g/tables/t/objects/a", "g/tables/t/objects/ab"

// createUploads starts an upload of each key, returning their ids in order.
func createUploads(t *testing.T, m storage.Multipart, keys ...string) []string {
	t.Helper()
	var ids []string
	for _, k := range keys {
		id, err := m.CreateMultipart(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// uploadsListed lists prefix page by page, limit uploads a page (0: the
// default), as "key id" lines.
func uploadsListed(t *testing.T, m storage.Multipart, prefix string, limit int) []string {
	t.Helper()
	var got []string
	opts := storage.ListMultipartOptions{Prefix: prefix, Limit: limit}
	for {
		page, err := m.ListMultipart(context.Background(), opts)
		if err != nil {
			t.Fatalf("list %q: %v", prefix, err)
		}
		for _, u := range page.Uploads {
			got = append(got, u.Key+" "+u.UploadID)
		}
		if !page.Truncated || len(page.Uploads) == 0 {
			return got
		}
		last := page.Uploads[len(page.Uploads)-1]
		opts.KeyMarker, opts.UploadIDMarker = last.Key, last.UploadID
	}
}
