package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/storage"
)

// deps are the connections one invocation opened, each on first use.
type deps struct {
	tc     sdkclient.Client
	cat    *catalog.Catalog
	store  storage.Store
	closer []func()
}

func (a *app) close() {
	for i := len(a.closer) - 1; i >= 0; i-- {
		a.closer[i]()
	}
	a.closer = nil
}

// temporal dials Temporal, bounded by --dial-timeout.
func (a *app) temporal(ctx context.Context) (sdkclient.Client, error) {
	if a.tc != nil {
		return a.tc, nil
	}
	opts, err := a.cfg.ClientOptions(sdkclient.Options{
		Logger: sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	})
	if err != nil {
		return nil, usageError{err}
	}
	tc, err := a.cfg.DialTemporal(ctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &unavailableError{
			what: "Temporal",
			next: fmt.Sprintf("check that Temporal is running at %s (--temporal-address, $GRAFT_TEMPORAL_ADDRESS); "+
				"for a local stack run `graft dev`", a.cfg.TemporalAddress),
			err: err,
		}
	}
	a.tc = tc
	a.closer = append(a.closer, tc.Close)
	return tc, nil
}

// client returns graft's Go client over the invocation's Temporal connection.
func (a *app) client(ctx context.Context) (*client.Client, error) {
	tc, err := a.temporal(ctx)
	if err != nil {
		return nil, err
	}
	return client.New(tc, client.Options{TaskQueue: a.cfg.TaskQueue}), nil
}

// catalog opens the ledger at $DATABASE_URL.
func (a *app) catalog(ctx context.Context) (*catalog.Catalog, error) {
	if a.cat != nil {
		return a.cat, nil
	}
	cat, err := catalog.Open(ctx, catalog.Config{DatabaseURL: a.cfg.DatabaseURL, Schema: a.cfg.DBSchema, MaxConns: 2})
	if err != nil {
		if errors.Is(err, catalog.ErrUnavailable) {
			return nil, &unavailableError{
				what: "Postgres",
				next: fmt.Sprintf("check that Postgres is running at %s and that $DATABASE_URL is right",
					catalog.RedactURL(a.cfg.DatabaseURL)),
				err: err,
			}
		}
		return nil, err
	}
	a.cat = cat
	a.closer = append(a.closer, cat.Close)
	return cat, nil
}

// openStore opens the configured store and checks that it answers a listing,
// so a wrong endpoint, bucket or credential shows before any work.
func (a *app) openStore(ctx context.Context) (storage.Store, error) {
	if a.store != nil {
		return a.store, nil
	}
	st, err := a.cfg.OpenStore(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, storage.ErrUnavailable) {
			return nil, &unavailableError{what: "the store", next: a.storeNext(), err: err}
		}
		return nil, withNext(err, "%s", a.storeNext())
	}
	a.store = st
	return st, nil
}

func (a *app) storeNext() string {
	if a.cfg.S3.Bucket == "" {
		return fmt.Sprintf("check the store directory %s (--store-dir, $GRAFT_STORE_DIR)", a.cfg.StoreDir)
	}
	return "check that the S3 endpoint answers and the bucket exists (--s3-endpoint, --s3-bucket), " +
		"and that the AWS SDK finds credentials (AWS_ACCESS_KEY_ID, AWS_PROFILE, an instance role)"
}
