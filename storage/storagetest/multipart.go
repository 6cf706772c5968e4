package storagetest

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/graftworks/graft/storage"
)

// MultipartOptions say what a backend's multipart uploads can be held to.
type MultipartOptions struct {
	// NoConditionalComplete is set for a server known to ignore
	// If-None-Match on CompleteMultipartUpload (gofakes3): the case that a
	// complete over an existing key fails is then left out, since that
	// server overwrites. Every real backend graft supports honours it.
	NoConditionalComplete bool
}

// RunMultipart runs the multipart conformance cases as subtests of t against
// stores from newStore, which must have multipart uploads.
func RunMultipart(t *testing.T, newStore func(t *testing.T) storage.Store, opts MultipartOptions) {
	t.Helper()
	cases := multipartCases
	if !opts.NoConditionalComplete {
		cases = append(cases[:len(cases):len(cases)], multipartCase{"Multipart_CompleteOverExistingKey_IsPreconditionFailedAndKeepsUpload", completeOverExisting})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			m, ok := storage.AsMultipart(s)
			if !ok {
				t.Fatalf("store %T has no multipart uploads", s)
			}
			c.run(t, s, m)
		})
	}
}

// multipartCase is a conformanceCase that also takes the store's multipart uploads.
type multipartCase struct {
	name string
	run  func(t *testing.T, s storage.Store, m storage.Multipart)
}

var multipartCases = []multipartCase{
	{"Multipart_DozenParts_CompleteIsTheConcatenationAndUnlisted", func(t *testing.T, s storage.Store, m storage.Multipart) {
		const key = "tables/t/objects/big"
		size := partSize(m)
		id := mustCreate(t, m, key)
		if ups := uploadsUnder(t, m, "tables/t/"); len(ups) != 1 || ups[0].Key != key || ups[0].UploadID != id || ups[0].Initiated.IsZero() {
			t.Fatalf("incomplete uploads = %+v, want only %s of %s with a start time", ups, id, key)
		}
		if _, err := s.Head(t.Context(), key); storage.CodeOf(err) != storage.CodeNotFound {
			t.Fatalf("head of an incomplete upload's key: err = %v, want not found", err)
		}
		var want []byte
		var parts []storage.Part
		for n := 1; n <= 12; n++ {
			body := partBody(n, size)
			if n == 12 {
				body = body[:size/3] // the last part may be short
			}
			parts = append(parts, mustUploadPart(t, m, key, id, n, body))
			want = append(want, body...)
		}
		res, err := m.CompleteMultipart(t.Context(), key, id, parts)
		if err != nil {
			t.Fatalf("complete: %v", err)
		}
		obj := mustGet(t, s, key)
		if !bytes.Equal(obj.Body, want) || obj.Size != int64(len(want)) {
			t.Fatalf("object = %d bytes, want the %d concatenated bytes", len(obj.Body), len(want))
		}
		// The complete's ETag is not compared with the object's: gofakes3 answers
		// the multipart form and then serves the MD5 of the whole. Graft never
		// conditions a write on a data object's ETag; reads must agree, though.
		head, err := s.Head(t.Context(), key)
		if err != nil || head.ETag != obj.ETag || head.Size != obj.Size || res.ETag == "" {
			t.Fatalf("head = %+v, %v; want the get's size and ETag %s (complete answered ETag %q)", head, err, obj.ETag, res.ETag)
		}
		if ups := uploadsUnder(t, m, ""); len(ups) != 0 {
			t.Fatalf("uploads listed after complete: %+v", ups)
		}
	}},
	{"Multipart_SamePartTwice_LastUploadWins", func(t *testing.T, s storage.Store, m storage.Multipart) {
		const key = "tables/t/objects/twice"
		size := partSize(m)
		id := mustCreate(t, m, key)
		mustUploadPart(t, m, key, id, 1, partBody(7, size))
		p1 := mustUploadPart(t, m, key, id, 1, partBody(1, size))
		p2 := mustUploadPart(t, m, key, id, 2, []byte("tail"))
		if _, err := m.CompleteMultipart(t.Context(), key, id, []storage.Part{p1, p2}); err != nil {
			t.Fatalf("complete: %v", err)
		}
		want := append(partBody(1, size), "tail"...)
		if obj := mustGet(t, s, key); !bytes.Equal(obj.Body, want) {
			t.Fatalf("object holds %d bytes, not the second upload of part 1 and part 2", len(obj.Body))
		}
	}},
	{"Multipart_CompleteUnknownUpload_IsNotFound", func(t *testing.T, s storage.Store, m storage.Multipart) {
		const key = "tables/t/objects/unknown"
		id := mustCreate(t, m, "tables/t/objects/other")
		p := mustUploadPart(t, m, "tables/t/objects/other", id, 1, []byte("x"))
		requireCode(t, errOf(m.CompleteMultipart(t.Context(), key, id, []storage.Part{p})), storage.CodeNotFound, "complete with another key's upload id")
		mustAbort(t, m, "tables/t/objects/other", id)
	}},
	{"Multipart_Abort_DiscardsAndRepeats_CompleteAfterIsNotFound", func(t *testing.T, s storage.Store, m storage.Multipart) {
		const key = "tables/t/objects/aborted"
		id := mustCreate(t, m, key)
		p := mustUploadPart(t, m, key, id, 1, []byte("doomed"))
		mustAbort(t, m, key, id)
		if ups := uploadsUnder(t, m, ""); len(ups) != 0 {
			t.Fatalf("uploads listed after abort: %+v", ups)
		}
		mustAbort(t, m, key, id)
		requireCode(t, errOf(m.CompleteMultipart(t.Context(), key, id, []storage.Part{p})), storage.CodeNotFound, "complete after abort")
		requireCode(t, errOf(s.Head(t.Context(), key)), storage.CodeNotFound, "head after abort")
	}},
	{"Multipart_CompleteWithWrongPartETag_IsRefused", func(t *testing.T, s storage.Store, m storage.Multipart) {
		const key = "tables/t/objects/wrong"
		id := mustCreate(t, m, key)
		p := mustUploadPart(t, m, key, id, 1, []byte("right"))
		p.ETag = madeUpETag
		requireCode(t, errOf(m.CompleteMultipart(t.Context(), key, id, []storage.Part{p})), storage.CodeRefused, "complete naming a part ETag never uploaded")
		missing := storage.Part{Number: 2, ETag: madeUpETag, Size: 1}
		requireCode(t, errOf(m.CompleteMultipart(t.Context(), key, id, []storage.Part{missing})), storage.CodeRefused, "complete naming a part never uploaded")
		requireCode(t, errOf(s.Head(t.Context(), key)), storage.CodeNotFound, "head after refused completes")
		mustAbort(t, m, key, id)
	}},
	{"Multipart_CompleteWithBadPartList_IsInvalidArgument", func(t *testing.T, s storage.Store, m storage.Multipart) {
		const key = "tables/t/objects/badlist"
		id := mustCreate(t, m, key)
		p1 := mustUploadPart(t, m, key, id, 1, partBody(1, partSize(m)))
		p2 := mustUploadPart(t, m, key, id, 2, []byte("b"))
		for name, parts := range map[string][]storage.Part{
			"empty":      nil,
			"descending": {p2, p1},
			"zero":       {{Number: 0, ETag: p1.ETag, Size: p1.Size}},
		} {
			requireCode(t, errOf(m.CompleteMultipart(t.Context(), key, id, parts)), storage.CodeInvalidArgument, "complete with "+name+" part list")
		}
		if min := m.MultipartLimits().MinPartSize; min > 1 {
			other := mustCreate(t, m, key)
			small := mustUploadPart(t, m, key, other, 1, []byte("too small"))
			last := mustUploadPart(t, m, key, other, 2, []byte("b"))
			requireCode(t, errOf(m.CompleteMultipart(t.Context(), key, other, []storage.Part{small, last})), storage.CodeInvalidArgument, "complete with a short part before the last")
			mustAbort(t, m, key, other)
		}
		mustAbort(t, m, key, id)
	}},
	{"Multipart_List_ByPrefixInKeyOrderAndPaged", func(t *testing.T, s storage.Store, m storage.Multipart) {
		keys := []string{"a/objects/3", "a/objects/1", "a/objects/2", "b/objects/1"}
		ids := map[string]string{}
		for _, k := range keys {
			ids[k] = mustCreate(t, m, k)
		}
		page, err := m.ListMultipart(t.Context(), storage.ListMultipartOptions{Prefix: "a/", Limit: 2})
		if err != nil {
			t.Fatalf("list page 1: %v", err)
		}
		if len(page.Uploads) != 2 || !page.Truncated {
			t.Fatalf("page 1 = %+v, want 2 uploads and truncated", page)
		}
		all := uploadsUnder(t, m, "a/")
		var got []string
		for _, u := range all {
			got = append(got, u.Key)
			if u.UploadID != ids[u.Key] {
				t.Fatalf("upload of %s has id %s, want %s", u.Key, u.UploadID, ids[u.Key])
			}
		}
		if want := []string{"a/objects/1", "a/objects/2", "a/objects/3"}; !slices.Equal(got, want) {
			t.Fatalf("uploads under a/ = %q, want %q", got, want)
		}
		if got := uploadsUnder(t, m, "b/"); len(got) != 1 || got[0].Key != "b/objects/1" {
			t.Fatalf("uploads under b/ = %+v", got)
		}
		for k, id := range ids {
			mustAbort(t, m, k, id)
		}
	}},
	{"Multipart_CancelledContext_WritesAmbiguousListUnavailable", func(t *testing.T, s storage.Store, m storage.Multipart) {
		const key = "tables/t/objects/cancel"
		id := mustCreate(t, m, key)
		p := mustUploadPart(t, m, key, id, 1, []byte("x"))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		requireCancelled(t, errOf(m.CreateMultipart(ctx, key)), storage.CodeAmbiguous, "create")
		requireCancelled(t, errOf(m.UploadPart(ctx, key, id, 2, bytes.NewReader([]byte("y")), 1)), storage.CodeAmbiguous, "upload part")
		requireCancelled(t, errOf(m.CompleteMultipart(ctx, key, id, []storage.Part{p})), storage.CodeAmbiguous, "complete")
		requireCancelled(t, m.AbortMultipart(ctx, key, id), storage.CodeAmbiguous, "abort")
		requireCancelled(t, errOf(m.ListMultipart(ctx, storage.ListMultipartOptions{})), storage.CodeUnavailable, "list")
		mustAbort(t, m, key, id)
	}},
}

// partSize is the smallest part the backend takes, at least 1 KiB.
func partSize(m storage.Multipart) int64 {
	return max(m.MultipartLimits().MinPartSize, 1<<10)
}

// partBody is part n's bytes: size bytes that differ between parts.
func partBody(n int, size int64) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(n*31 + i*7)
	}
	return b
}

func mustCreate(t *testing.T, m storage.Multipart, key string) string {
	t.Helper()
	id, err := m.CreateMultipart(t.Context(), key)
	if err != nil {
		t.Fatalf("create multipart %q: %v", key, err)
	}
	if id == "" {
		t.Fatalf("create multipart %q: empty upload id", key)
	}
	return id
}

func mustUploadPart(t *testing.T, m storage.Multipart, key, id string, n int, body []byte) storage.Part {
	t.Helper()
	p, err := m.UploadPart(t.Context(), key, id, n, bytes.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatalf("upload part %d of %q: %v", n, key, err)
	}
	if p.Number != n || p.Size != int64(len(body)) || p.ETag == "" {
		t.Fatalf("upload part %d = %+v, want number %d size %d and an ETag", n, p, n, len(body))
	}
	return p
}

func mustAbort(t *testing.T, m storage.Multipart, key, id string) {
	t.Helper()
	if err := m.AbortMultipart(t.Context(), key, id); err != nil {
		t.Fatalf("abort %s of %q: %v", id, key, err)
	}
}

func uploadsUnder(t *testing.T, m storage.Multipart, prefix string) []storage.Upload {
	t.Helper()
	var out []storage.Upload
	if err := storage.ListAllMultipart(t.Context(), m, prefix, func(u storage.Upload) error {
		out = append(out, u)
		return nil
	}); err != nil {
		t.Fatalf("list multipart %q: %v", prefix, err)
	}
	return out
}

func completeOverExisting(t *testing.T, s storage.Store, m storage.Multipart) {
	const key = "tables/t/objects/taken"
	mustPut(t, s, key, []byte("first"), storage.PutOptions{IfNoneMatch: true})
	id := mustCreate(t, m, key)
	p := mustUploadPart(t, m, key, id, 1, []byte("second"))
	requireCode(t, errOf(m.CompleteMultipart(t.Context(), key, id, []storage.Part{p})), storage.CodePreconditionFailed, "complete over an existing key")
	requireObject(t, s, key, "first")
	if ups := uploadsUnder(t, m, "tables/"); len(ups) != 1 || ups[0].UploadID != id {
		t.Fatalf("uploads after a failed complete = %+v, want ours still there to abort", ups)
	}
	mustAbort(t, m, key, id)
}
