// Command soak runs the seeded soak (cmd/internal/soak, docs/testing.md) on its own stack:
//
//	go run ./cmd/soak -seeds 1000 -backend localfs -parallel 8 -from 1
//	go run ./cmd/soak -backend versitygw -from 42 -seeds 1 -keep o0,o3,f1   # reproduce a shrunk failure
//
// It starts the Temporal dev server (and versitygw for that backend) itself, uses the
// Postgres at DATABASE_URL in a schema of its own, prints every violation with its seed,
// schedule and shortest failing sub-schedule, and ends with the totals; it exits 1 when
// any seed violated.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/graftworks/graft/cmd/internal/soak"
)

func main() {
	soak.MaybeChild()
	seeds := flag.Int("seeds", 200, "how many seeds")
	from := flag.Uint64("from", 1, "first seed")
	backend := flag.String("backend", "localfs", "localfs or versitygw")
	parallel := flag.Int("parallel", 8, "schedules at once")
	keep := flag.String("keep", "", "comma-separated op and fault ids to keep (a shrunk schedule; none keeps none)")
	noShrink := flag.Bool("no-shrink", false, "do not shrink failing schedules")
	persist := flag.Bool("persist", false, "keep the Temporal dev server's state in a file (implied by -restart-every)")
	restartEvery := flag.Int("restart-every", 0, "restart versitygw / the Temporal dev server (state on disk) after every N seeds (0: never)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	soak.StepKnobs()
	st, err := soak.Start(ctx, soak.StackConfig{Backend: soak.Backend(*backend), Restartable: *restartEvery > 0 || *persist})
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	tot := soak.Soak(ctx, st, soak.Config{Backend: soak.Backend(*backend), From: *from, Seeds: *seeds, Parallel: *parallel,
		Keep: soak.ParseKeep(*keep), NoShrink: *noShrink, RestartEvery: *restartEvery, Out: os.Stdout})
	st.Close()
	fmt.Print(tot.Summary())
	if len(tot.Failures) > 0 {
		os.Exit(1)
	}
}
