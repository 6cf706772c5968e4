package faults_test

import (
	"testing"

	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/storagetest"
)

// With no rules the wrapper is invisible: it keeps the whole storage
// contract of the store it wraps.
func TestConformance_NoRules(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			storagetest.Run(t, func(t *testing.T) storage.Store { return faults.Wrap(b.open(t)) })
		})
	}
}

func TestConformance_Multipart_NoRules(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			storagetest.RunMultipart(t, func(t *testing.T) storage.Store { return faults.Wrap(b.open(t)) }, storagetest.MultipartOptions{})
		})
	}
}
