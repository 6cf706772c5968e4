// Command buildtools builds graft's pinned external tools (internal/tools) into
// .bin/ unless they are already there, and prints where they are. The test
// script runs it first so test binaries never race to build.
//
// The tools build in lanes at once (tools.Lanes): a cold build spends much of
// its time fetching modules and linking one binary, which leaves a core idle
// that the other lane's compile can use. Tools that share compiled packages
// stay in one lane, so the later ones reuse the first's.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/graftworks/graft/internal/tools"
)

func main() {
	errs := make([]error, len(tools.Lanes))
	var wg sync.WaitGroup
	for i, lane := range tools.Lanes {
		wg.Go(func() {
			for _, t := range lane {
				start := time.Now()
				path, err := t.Ensure(context.Background())
				if err != nil {
					errs[i] = err
					return
				}
				fmt.Printf("%s %s ready at %s (%.1fs)\n", t.Name, t.Version, path, time.Since(start).Seconds())
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "buildtools:", err)
		os.Exit(1)
	}
}
