// Command check-worker runs the example merge check graft-example.no-empty-tables on its
// own task queue, reading the store graft's workers use:
//
//	check-worker --task-queue graft-checks --s3-bucket lake   # or --store-dir ./.graft-data
package main

import (
	"cmp"
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/graftworks/graft/examples/checks"
)

func main() {
	env := func(name, def string) string { return cmp.Or(os.Getenv(name), def) }
	var cfg checks.Config
	flag.StringVar(&cfg.TemporalAddress, "temporal-address", env("GRAFT_TEMPORAL_ADDRESS", "127.0.0.1:7233"), "Temporal frontend [$GRAFT_TEMPORAL_ADDRESS]")
	flag.StringVar(&cfg.Namespace, "namespace", env("GRAFT_NAMESPACE", "default"), "Temporal namespace [$GRAFT_NAMESPACE]")
	flag.StringVar(&cfg.TaskQueue, "task-queue", env("GRAFT_CHECK_TASK_QUEUE", "graft-checks"), "the task queue the branch rule names for the check [$GRAFT_CHECK_TASK_QUEUE]")
	flag.StringVar(&cfg.StoreDir, "store-dir", env("GRAFT_STORE_DIR", ".graft-data"), "local store directory, read without --s3-bucket [$GRAFT_STORE_DIR]")
	flag.StringVar(&cfg.S3.Bucket, "s3-bucket", os.Getenv("GRAFT_S3_BUCKET"), "S3 bucket of the graphs [$GRAFT_S3_BUCKET]")
	flag.StringVar(&cfg.S3.Endpoint, "s3-endpoint", os.Getenv("GRAFT_S3_ENDPOINT"), "S3 endpoint URL; AWS's when empty [$GRAFT_S3_ENDPOINT]")
	flag.StringVar(&cfg.S3.Prefix, "s3-prefix", os.Getenv("GRAFT_S3_PREFIX"), "key prefix inside the bucket [$GRAFT_S3_PREFIX]")
	flag.StringVar(&cfg.S3.Region, "s3-region", os.Getenv("GRAFT_S3_REGION"), "S3 signing region [$GRAFT_S3_REGION]")
	pathStyle, _ := strconv.ParseBool(os.Getenv("GRAFT_S3_PATH_STYLE"))
	flag.BoolVar(&cfg.S3.PathStyle, "s3-path-style", pathStyle, "bucket in the URL path [$GRAFT_S3_PATH_STYLE]")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := checks.Run(ctx, cfg); err != nil {
		log.Fatal(err)
	}
}
