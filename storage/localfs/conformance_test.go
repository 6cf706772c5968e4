package localfs_test

import (
	"testing"

	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/localfs"
	"github.com/graftworks/graft/storage/storagetest"
)

func TestConformance(t *testing.T) {
	t.Run("localfs", func(t *testing.T) {
		storagetest.Run(t, func(t *testing.T) storage.Store {
			s, err := localfs.Open(t.TempDir())
			if err != nil {
				t.Fatalf("open store: %v", err)
			}
			return s
		})
	})
}

func TestConformance_Multipart(t *testing.T) {
	storagetest.RunMultipart(t, func(t *testing.T) storage.Store {
		s, err := localfs.Open(t.TempDir())
		if err != nil {
			t.Fatalf("open store: %v", err)
		}
		return s
	}, storagetest.MultipartOptions{})
}
