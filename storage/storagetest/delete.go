package storagetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/graftworks/graft/storage"
)

var deleteCases = []conformanceCase{
	{"Delete_ExistingAndMissingKey_BothSucceed", func(t *testing.T, s storage.Store) {
		const key, kept = "tables/t/objects/01", "tables/t/objects/02"
		mustPut(t, s, key, []byte("x"), storage.PutOptions{IfNoneMatch: true})
		mustPut(t, s, kept, []byte("y"), storage.PutOptions{IfNoneMatch: true})
		if err := s.Delete(t.Context(), key); err != nil {
			t.Fatalf("delete existing key: %v", err)
		}
		requireCode(t, errOf(s.Head(t.Context(), key)), storage.CodeNotFound, "head after delete")
		if err := s.Delete(t.Context(), key); err != nil {
			t.Fatalf("delete the same key again: %v", err)
		}
		if err := s.Delete(t.Context(), "never/written"); err != nil {
			t.Fatalf("delete a key never written: %v", err)
		}
		if keys := Keys(t, s, ""); !slices.Equal(keys, []string{kept}) {
			t.Fatalf("keys after delete = %q, want only %q", keys, kept)
		}
	}},
	{"DeleteBatch_1000KeysWithMissing_DeletesAllAndRepeats", func(t *testing.T, s storage.Store) {
		const kept = "sweep/kept"
		objects := map[string][]byte{kept: []byte("kept")}
		var batch []string
		for i := range storage.MaxBatchDelete / 2 {
			key := fmt.Sprintf("sweep/objects/%04d", i)
			objects[key] = []byte(key)
			batch = append(batch, key)
			batch = append(batch, fmt.Sprintf("sweep/missing/%04d", i))
		}
		if _, err := PutMany(t.Context(), s, objects, writers); err != nil {
			t.Fatalf("write fixtures: %v", err)
		}
		if len(batch) != storage.MaxBatchDelete {
			t.Fatalf("batch has %d keys, want %d", len(batch), storage.MaxBatchDelete)
		}
		if err := s.DeleteBatch(t.Context(), batch); err != nil {
			t.Fatalf("delete batch: %v", err)
		}
		if keys := Keys(t, s, ""); !slices.Equal(keys, []string{kept}) {
			t.Fatalf("keys after delete batch = %s, want only %q", abbreviate(keys), kept)
		}
		if err := s.DeleteBatch(t.Context(), batch); err != nil {
			t.Fatalf("repeat the same delete batch: %v", err)
		}
	}},
	{"DeleteBatch_OverMaxBatchDelete_IsInvalidArgumentAndDeletesNothing", func(t *testing.T, s storage.Store) {
		const key = "sweep/objects/0000"
		mustPut(t, s, key, []byte("x"), storage.PutOptions{IfNoneMatch: true})
		batch := []string{key}
		for i := 1; i <= storage.MaxBatchDelete; i++ {
			batch = append(batch, fmt.Sprintf("sweep/objects/%04d", i))
		}
		requireCode(t, s.DeleteBatch(t.Context(), batch), storage.CodeInvalidArgument, fmt.Sprintf("delete batch of %d keys", len(batch)))
		if _, err := s.Head(t.Context(), key); err != nil {
			t.Fatalf("head %q after a refused batch: %v (the batch must delete nothing)", key, err)
		}
	}},
}
