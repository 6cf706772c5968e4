package faults_test

import (
	"bytes"
	"context"
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
