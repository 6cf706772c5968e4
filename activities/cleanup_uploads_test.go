package activities

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/memstore"
)

// CleanupUploads works from the upload records alone, on a store that lists uploads only
// for an exact key and on one that cannot list them: a crashed writer's upload is found
// (counted by a dry run, aborted by a sweep, which deletes its record), a completed
// upload's record is deleted with its object kept, and the record of a key a running
// operation pins is kept with its upload. Inside the guard window nothing is found.
func TestCleanupUploads_FromRecords_AbortsCrashedUploads_KeepsPinnedAndYoung(t *testing.T) {
	for _, listing := range []struct {
		name string
		mode faults.MultipartListing
	}{{"exact_key_listing", faults.ListExactKeyUploads}, {"no_listing", faults.ListUploadsUnsupported}} {
		t.Run(listing.name, func(t *testing.T) {
			ctx := context.Background()
			cat := catalogtest.Open(t)
			s := faults.Wrap(memstore.New())
			const g = "sales"
			if _, err := graph.Init(ctx, s, graph.InitParams{Graph: g, MainTree: ulid.Make(), Op: "op-init",
				Time: time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)}); err != nil {
				t.Fatal(err)
			}
			crashed, pinned, done := ulid.Make(), ulid.Make(), ulid.Make()
			opts := graph.UploadOptions{Threshold: 1024, PartSize: 4096, Concurrency: 1}
			body := bytes.Repeat([]byte{1}, 3*4096)
			for _, id := range []ulid.ULID{crashed, pinned} {
				removeParts := s.Add(faults.Rule{Op: faults.OpUploadPart, Mode: faults.Refuse, Status: 403, Skip: 1})
				removeAborts := s.Add(faults.Rule{Op: faults.OpAbortMultipart, Mode: faults.Refuse, Status: 403})
				if _, err := graph.UploadObject(ctx, s, g, "t", id, bytes.NewReader(body), int64(len(body)), opts); !errors.Is(err, storage.ErrRefused) {
					t.Fatalf("crashing upload: %v", err)
				}
				removeParts()
				removeAborts()
			}
			if _, err := graph.UploadObject(ctx, s, g, "t", done, bytes.NewReader(body), int64(len(body)), opts); err != nil {
				t.Fatal(err)
			}
			if _, err := cat.OperationInsert(ctx, catalog.OperationInsertParams{ID: "op-write", Kind: catalog.OpWriteTable, Graph: g}); err != nil {
				t.Fatal(err)
			}
			pinnedKey := format.ObjectKey(g, "t", pinned)
			if err := cat.PinsRegister(ctx, catalog.PinsRegisterParams{OpID: "op-write", Graph: g,
				Pins: []catalog.Pin{{Kind: catalog.ObjectData, Key: pinnedKey}}}); err != nil {
				t.Fatal(err)
			}
			s.SetMultipartListing(listing.mode)
			a := &Activities{Catalog: cat, Store: s}
			runID := ulid.Make().String()
			if begun, err := a.CleanupBegin(ctx, CleanupBeginInput{RunID: runID, Graph: g, Mode: "sweep", Policy: []byte(`{}`)}); err != nil || begun.Outcome != "" {
				t.Fatalf("begin: %+v, %v", begun, err)
			}
			in := CleanupUploadsInput{RunID: runID, Graph: g, Now: time.Now().Add(time.Minute), MaxPlanKeys: 10}

			guarded := in
			guarded.GuardWindow, guarded.Abort = time.Hour, true
			if res, err := a.CleanupUploads(ctx, guarded); err != nil || !reflect.DeepEqual(res, CleanupUploadsResult{}) {
				t.Fatalf("inside the guard window: %+v, %v; want nothing found", res, err)
			}
			crashedKey := format.ObjectKey(g, "t", crashed)
			dry, err := a.CleanupUploads(ctx, in)
			if err != nil || dry.Found != 1 || dry.Aborted != 0 || dry.Pinned != 1 || dry.Removed != 0 ||
				len(dry.Keys) != 1 || dry.Keys[0] != crashedKey {
				t.Fatalf("dry run: %+v, %v; want the crashed upload found, the pinned one kept", dry, err)
			}
			in.Abort = true
			res, err := a.CleanupUploads(ctx, in)
			if err != nil || res.Found != 1 || res.Aborted != 1 || res.Pinned != 1 || res.Removed != 2 || res.Unsettled != 0 || res.Unknown != 0 {
				t.Fatalf("sweep: %+v, %v; want one aborted, two records removed, the pinned one kept", res, err)
			}

			m, _ := storage.AsMultipart(s.Inner())
			var left []string
			if err := storage.ListAllMultipart(ctx, m, g+"/", func(u storage.Upload) error { left = append(left, u.Key); return nil }); err != nil {
				t.Fatal(err)
			}
			if len(left) != 1 || left[0] != pinnedKey {
				t.Fatalf("uploads left = %v, want the pinned key's only", left)
			}
			var records []string
			if err := storage.ListAll(ctx, s.Inner(), format.UploadsPrefix(g), func(o storage.ObjectInfo) error { records = append(records, o.Key); return nil }); err != nil {
				t.Fatal(err)
			}
			if len(records) != 1 || records[0] != format.UploadKey(g, "t", pinned) {
				t.Fatalf("records left = %v, want the pinned key's only", records)
			}
			if _, err := s.Head(ctx, format.ObjectKey(g, "t", done)); err != nil {
				t.Fatalf("the completed object: %v", err)
			}
		})
	}
}
