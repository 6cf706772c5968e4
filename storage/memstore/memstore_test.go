package memstore_test

import (
	"testing"

	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/memstore"
	"github.com/graftworks/graft/storage/storagetest"
)

func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store { return memstore.New() })
}

func TestConformance_Multipart(t *testing.T) {
	storagetest.RunMultipart(t, func(t *testing.T) storage.Store { return memstore.New() }, storagetest.MultipartOptions{})
	t.Run("s3_limits", func(t *testing.T) {
		storagetest.RunMultipart(t, func(t *testing.T) storage.Store {
			return memstore.New(memstore.WithMultipartLimits(storage.S3MultipartLimits))
		}, storagetest.MultipartOptions{})
	})
}
