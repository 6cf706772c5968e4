// Command buildtools builds graft's pinned external tools (the Temporal CLI and
// versitygw) into .bin/ unless they are already there, and prints where they are.
// The test script runs it first so test binaries never race to build.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/graftworks/graft/internal/tools"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "buildtools:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	for _, t := range tools.All {
		start := time.Now()
		path, err := t.Ensure(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("%s %s ready at %s (%.1fs)\n", t.Name, t.Version, path, time.Since(start).Seconds())
	}
	return nil
}
