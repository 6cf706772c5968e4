package faults_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/localfs"
)

// A ref put is held in flight while a fence takes its key; released late,
// it cannot land.
func Example_heldPutLosesToFence() {
	dir, _ := os.MkdirTemp("", "faults-example-")
	defer os.RemoveAll(dir)
	inner, _ := localfs.Open(dir)
	ctx := context.Background()

	w := faults.Wrap(inner)
	w.Add(faults.Rule{Name: "late-ref", Op: faults.OpPut, KeyPrefix: "g/refs/", Mode: faults.Hold, Times: 1})

	_, err := w.Put(ctx, "g/refs/x.json", []byte("live"), storage.PutOptions{IfNoneMatch: true})
	fmt.Println("publish:", storage.CodeOf(err))
	_, err = w.Put(ctx, "g/refs/x.json", []byte("fence"), storage.PutOptions{IfNoneMatch: true})
	fmt.Println("fence:", err)
	_, err = w.Held()[0].Release(ctx)
	fmt.Println("late publish lands:", !errors.Is(err, storage.ErrPreconditionFailed))
	fmt.Println("ref puts sent:", w.CountMatching(faults.Rule{Op: faults.OpPut, KeyPrefix: "g/refs/"}).Sent)
	// Output:
	// publish: ambiguous
	// fence: <nil>
	// late publish lands: false
	// ref puts sent: 2
}
