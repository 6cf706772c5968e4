// Command graft-worker runs graft's Temporal worker; see internal/workercmd
// and `graft-worker --help`.
package main

import (
	"context"
	"os"

	"github.com/graftworks/graft/internal/workercmd"
)

func main() {
	os.Exit(workercmd.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
