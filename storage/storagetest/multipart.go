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
	// ExactKeyUploadListing is set for a server that lists incomplete uploads
	// only for a prefix that is one exact object key (MinIO): a broader
	// prefix lists nothing, or, for the empty one, whatever uploads the
	// process remembers starting, unpaged. graft needs no more, since it
	// lists one key's uploads at a time. The cases then list each key's
	// uploads by that key instead of a broader prefix, and the case of
	// listing by prefix in key order is left out.
	ExactKeyUploadListing bool
}

// uploadScope is the prefix a case lists under to find key's uploads: broad,
// or key itself on a server that lists only by exact key.
func (o MultipartOptions) uploadScope(broad, key string) string {
	if o.ExactKeyUploadListing {
		return key
	}
	return broad
}

// RunMultipart runs the multipart conformance cases as subtests of t against
// stores from newStore, which must have multipart uploads.
func RunMultipart(t *testing.T, newStore func(t *testing.T) storage.Store, opts MultipartOptions) {
	t.Helper()
	cases := slices.Clone(multipartCases)
	if !opts.ExactKeyUploadListing {
		cases = append(cases, multipartCase{"Multipart_List_ByPrefixInKeyOrderAndPaged", listByPrefix})
	}
	if !opts.NoConditionalComplete {
		cases = append(cases, multipartCase{"Multipart_CompleteOverExistingKey_IsPreconditionFailedAndKeepsUpload", completeOverExisting})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			m, ok := storage.AsMultipart(s)
			if !ok {
				t.Fatalf("store %T has no multipart uploads", s)
			}
			c.run(t, s, m, opts)
		})
	}
}

// multipartCase is a conformanceCase that also takes the store's multipart
// uploads and what the backend declares of them.
type multipartCase struct {
	name string
	run  func(t *testing.T, s storage.Store, m storage.Multipart, o MultipartOptions)
}

var multipartCases = []multipartCase{
	{"Multipart_DozenParts_CompleteIsTheConcatenationAndUnlisted", func(t *testing.T, s storage.Store, m storage.Multipart, o MultipartOptions) {
		const key = "tables/t/objects/big"
		size := partSize(m)
		id := mustCreate(t, m, key)
		if ups := uploadsUnder(t, m, o.uploadScope("tables/t/", key)); len(ups) != 1 || ups[0].Key != key || ups[0].UploadID != id || ups[0].Initiated.IsZero() {
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
		if ups := uploadsUnder(t, m, o.uploadScope("", key)); len(ups) != 0 {
			t.Fatalf("uploads listed after complete: %+v", ups)
		}
	}},
	{"Multipart_SamePartTwice_LastUploadWins", func(t *testing.T, s storage.Store, m storage.Multipart, o MultipartOptions) {
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
	{"Multipart_CompleteRepeated_ChangesNothing", func(t *testing.T, s storage.Store, m storage.Multipart, o MultipartOptions) {
		// As a complete whose answer was lost and is sent again: the upload is
		// gone (not found; versitygw answers success), or, under its
		// put-if-absent, the object it made is there (precondition failed,
		// MinIO). Either way the object is the first complete's.
		const key = "tables/t/objects/again"
		id := mustCreate(t, m, key)
		p := mustUploadPart(t, m, key, id, 1, []byte("once"))
		first, err := m.CompleteMultipart(t.Context(), key, id, []storage.Part{p})
		if err != nil {
			t.Fatalf("complete: %v", err)
		}
		if _, err := m.CompleteMultipart(t.Context(), key, id, []storage.Part{p}); err != nil {
			if c := storage.CodeOf(err); c != storage.CodeNotFound && c != storage.CodePreconditionFailed {
				t.Fatalf("repeated complete: %v, want success, not found or precondition failed", err)
			}
			requireCode(t, err, storage.CodeOf(err), "repeated complete")
		}
		obj := mustGet(t, s, key)
		if string(obj.Body) != "once" {
			t.Fatalf("object after a repeated complete = %q, want %q", obj.Body, "once")
		}
		if head, err := s.Head(t.Context(), key); err != nil || head.ETag != obj.ETag || first.ETag == "" {
			t.Fatalf("head after a repeated complete = %+v, %v; want the get's ETag %s", head, err, obj.ETag)
		}
		if ups := uploadsUnder(t, m, o.uploadScope("", key)); len(ups) != 0 {
			t.Fatalf("uploads listed after a repeated complete: %+v", ups)
		}
	}},
	{"Multipart_CompleteUnknownUpload_IsNotFound", func(t *testing.T, s storage.Store, m storage.Multipart, o MultipartOptions) {
		const key = "tables/t/objects/unknown"
		id := mustCreate(t, m, "tables/t/objects/other")
		p := mustUploadPart(t, m, "tables/t/objects/other", id, 1, []byte("x"))
		requireCode(t, errOf(m.CompleteMultipart(t.Context(), key, id, []storage.Part{p})), storage.CodeNotFound, "complete with another key's upload id")
		mustAbort(t, m, "tables/t/objects/other", id)
	}},
	{"Multipart_Abort_DiscardsAndRepeats_CompleteAfterIsNotFound", func(t *testing.T, s storage.Store, m storage.Multipart, o MultipartOptions) {
		const key = "tables/t/objects/aborted"
		id := mustCreate(t, m, key)
		p := mustUploadPart(t, m, key, id, 1, []byte("doomed"))
		mustAbort(t, m, key, id)
		if ups := uploadsUnder(t, m, o.uploadScope("", key)); len(ups) != 0 {
			t.Fatalf("uploads listed after abort: %+v", ups)
		}
		mustAbort(t, m, key, id)
		requireCode(t, errOf(m.CompleteMultipart(t.Context(), key, id, []storage.Part{p})), storage.CodeNotFound, "complete after abort")
		requireCode(t, errOf(s.Head(t.Context(), key)), storage.CodeNotFound, "head after abort")
	}},
	{"Multipart_CompleteWithWrongPartETag_IsRefused", func(t *testing.T, s storage.Store, m storage.Multipart, o MultipartOptions) {
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
	{"Multipart_CompleteWithBadPartList_IsInvalidArgument", func(t *testing.T, s storage.Store, m storage.Multipart, o MultipartOptions) {
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
	{"Multipart_List_ByExactKey_OnlyThatKeysUploadsPaged", listByExactKey},
	{"Multipart_CancelledContext_WritesAmbiguousListUnavailable", func(t *testing.T, s storage.Store, m storage.Multipart, o MultipartOptions) {
		const key = "tables/t/objects/cancel"
		id := mustCreate(t, m, key)
		p := mustUploadPart(t, m, key, id, 1, []byte("x"))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		requireCancelled(t, errOf(m.CreateMultipart(ctx, key)), storage.CodeAmbiguous, "create")
		requireCancelled(t, errOf(m.UploadPart(ctx, key, id, 2, bytes.NewReader([]byte("y")), 1)), storage.CodeAmbiguous, "upload part")
		requireCancelled(t, errOf(m.CompleteMultipart(ctx, key, id, []storage.Part{p})), storage.CodeAmbiguous, "complete")
		requireCancelled(t, m.AbortMultipart(ctx, key, id), storage.CodeAmbiguous, "abort")
		requireCancelled(t, errOf(m.ListMultipart(ctx, storage.ListMultipartOptions{Prefix: o.uploadScope("", key)})), storage.CodeUnavailable, "list")
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

func completeOverExisting(t *testing.T, s storage.Store, m storage.Multipart, o MultipartOptions) {
	const key = "tables/t/objects/taken"
	mustPut(t, s, key, []byte("first"), storage.PutOptions{IfNoneMatch: true})
	id := mustCreate(t, m, key)
	p := mustUploadPart(t, m, key, id, 1, []byte("second"))
	requireCode(t, errOf(m.CompleteMultipart(t.Context(), key, id, []storage.Part{p})), storage.CodePreconditionFailed, "complete over an existing key")
	requireObject(t, s, key, "first")
	if ups := uploadsUnder(t, m, o.uploadScope("tables/", key)); len(ups) != 1 || ups[0].UploadID != id {
		t.Fatalf("uploads after a failed complete = %+v, want ours still there to abort", ups)
	}
	mustAbort(t, m, key, id)
}

// listByPrefix lists uploads under a prefix of several keys, in key order and
// paged.
func listByPrefix(t *testing.T, s storage.Store, m storage.Multipart, o MultipartOptions) {
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
}

// listByExactKey lists one key's uploads by that key: a first page of one
// is truncated; all of them are the two uploads of "a/b", each once, and
// never the upload of "a/bc", which the key is a prefix of — through
// ListKeyMultipart on every backend. Listed under the prefix "a/b", a server
// listing by prefix lists a/bc's too, in key order after a/b's; one listing
// by exact key does not.
func listByExactKey(t *testing.T, s storage.Store, m storage.Multipart, o MultipartOptions) {
	const key, longer = "a/b", "a/bc"
	ids := []string{mustCreate(t, m, key), mustCreate(t, m, key)}
	other := mustCreate(t, m, longer)
	slices.Sort(ids)

	page, err := m.ListMultipart(t.Context(), storage.ListMultipartOptions{Prefix: key, Limit: 1})
	if err != nil {
		t.Fatalf("list page 1: %v", err)
	}
	if len(page.Uploads) != 1 || page.Uploads[0].Key != key || !page.Truncated {
		t.Fatalf("page 1 = %+v, want one upload of %s and truncated", page, key)
	}
	var got []string
	err = storage.ListKeyMultipart(t.Context(), m, key, func(u storage.Upload) error {
		if u.Initiated.IsZero() {
			t.Errorf("upload %s of %s has no start time", u.UploadID, u.Key)
		}
		got = append(got, u.UploadID)
		return nil
	})
	if err != nil {
		t.Fatalf("list the uploads of %s: %v", key, err)
	}
	slices.Sort(got)
	if !slices.Equal(got, ids) {
		t.Fatalf("uploads of %s = %q, want %q", key, got, ids)
	}

	var keys []string
	for _, u := range uploadsUnder(t, m, key) {
		keys = append(keys, u.Key)
	}
	want := []string{key, key, longer}
	if o.ExactKeyUploadListing {
		want = want[:2]
	}
	if !slices.Equal(keys, want) {
		t.Fatalf("uploads listed under the prefix %q are of %q, want %q", key, keys, want)
	}
	for _, id := range ids {
		mustAbort(t, m, key, id)
	}
	mustAbort(t, m, longer, other)
}
