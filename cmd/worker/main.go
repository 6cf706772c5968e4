// Command graft-worker runs graft's Temporal worker; see cmd/internal/workercmd
// and `graft-worker --help`.
package main

import (
	"context"
	"os"

	"github.com/graftworks/graft/cmd/internal/workercmd"
)

func main() {
	os.Exit(workercmd.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
