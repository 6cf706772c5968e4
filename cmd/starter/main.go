// Command graft is graft's operator command line; see internal/cli and
// `graft --help`.
package main

import (
	"context"
	"os"

	"github.com/graftworks/graft/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
