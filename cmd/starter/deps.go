package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/cmd/internal/conncfg"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/storage"
)

// deps are the connections one invocation opened, each on first use.
type deps struct {
	tc sdkclient.Client
	// tcErr is why Temporal could not be dialled, for commands that go on
	// without it (op show, op list --stuck).
	tcErr  error
	ledger *client.Ops
	store  storage.Store
	closer []func()
}

func (a *app) close() {
	for i := len(a.closer) - 1; i >= 0; i-- {
		a.closer[i]()
	}
	a.closer = nil
}

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
		return nil, unavailable(err, "check that Temporal is running at %s (--temporal-address, $GRAFT_TEMPORAL_ADDRESS); "+
			"for a local stack run `graft dev`", a.cfg.TemporalAddress)
	}
	a.tc = tc
	a.closer = append(a.closer, tc.Close)
	return tc, nil
}

// client is the command's client once its local checks passed: the first
// failed check is the command's error, before anything is contacted.
func (a *app) client(ctx context.Context, checks ...error) (*client.Client, error) {
	if err := cmp.Or(checks...); err != nil {
		return nil, err
	}
	tc, err := a.temporal(ctx)
	if err != nil {
		return nil, err
	}
	opts := client.Options{TaskQueue: a.cfg.TaskQueue}
	if a.cfg.Output == outputText {
		opts.Notify = a.notify
	}
	return client.New(tc, opts), nil
}

// notify tells the operator, once, why a wait is taking long and what the
// command does meanwhile (text mode only: in json mode stderr is kept for the
// one error object).
func (a *app) notify(n client.Notice) {
	msg := n.Message
	if n.Dependency == "" && n.Kind != client.NoticeNoWorker {
		// The workflow does not say why; if the store does not answer us
		// either, that is most likely why.
		if down := a.storeDown(); down != "" {
			msg = down + ", so the operation's step is most likely retrying on it; still waiting for the operation to end"
		}
	}
	follow := ""
	if n.OpID != "" {
		follow = fmt.Sprintf(" (`graft op wait %s`)", n.OpID)
	}
	fmt.Fprintf(a.stderr, "graft: waiting: %s.\n  Ctrl-C stops waiting; the operation keeps running in Temporal%s.\n", msg, follow)
}

// storeDown says that the configured S3 store does not answer, or "".
func (a *app) storeDown() string {
	if a.cfg.S3.Bucket == "" { // a local directory answers, or is a configuration error
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(a.cfg.DialTimeout, 10*time.Second))
	defer cancel()
	st, err := a.cfg.OpenStore(ctx)
	if err == nil {
		if c, ok := st.(interface{ Close() error }); ok {
			_ = c.Close()
		}
		return ""
	}
	if !errors.Is(err, storage.ErrUnavailable) && ctx.Err() == nil {
		return ""
	}
	return fmt.Sprintf("the store %s does not answer from here either", a.cfg.DescribeStore())
}

// ops opens the ledger at $DATABASE_URL (--db-schema) once checks passed.
// withTemporal also dials Temporal, so waits and the views can ask the
// workflows; when Temporal does not answer, the ledger-only Ops is returned
// and tcErr says why.
func (a *app) ops(ctx context.Context, withTemporal bool, checks ...error) (*client.Ops, error) {
	if err := cmp.Or(checks...); err != nil {
		return nil, err
	}
	if a.ledger == nil {
		ops, err := client.OpenOps(ctx, client.LedgerConfig{DatabaseURL: a.cfg.DatabaseURL, Schema: a.cfg.DBSchema, MaxConns: 2}, nil)
		if err != nil {
			return nil, a.ledgerError(err)
		}
		a.ledger = ops
		a.closer = append(a.closer, ops.Close)
	}
	if !withTemporal {
		return a.ledger, nil
	}
	c, err := a.client(ctx)
	if err != nil {
		a.tcErr = err
		return a.ledger, nil
	}
	return a.ledger.WithClient(c), nil
}

func (a *app) ledgerError(err error) error {
	switch {
	case errors.Is(err, client.ErrLedgerUnavailable):
		return unavailable(err, "check that Postgres is running at %s and that $DATABASE_URL is right", catalog.RedactURL(a.cfg.DatabaseURL))
	case errors.Is(err, client.ErrLedgerNotMigrated):
		schema := cmp.Or(a.cfg.DBSchema, "the connection's default (public)")
		return withNext(err, "the ledger's tables are not in schema %s (%s) of %s: if the workers use another schema, set --db-schema "+
			"($GRAFT_DB_SCHEMA, or the profile `graft dev` writes); if nothing applied the migrations, run `graft-worker migrate`",
			schema, a.settingName(conncfg.FlagDBSchema), catalog.RedactURL(a.cfg.DatabaseURL))
	}
	return err
}

// temporalNote says, after a view, that Temporal could not be asked.
func (a *app) temporalNote() string {
	if a.tcErr == nil {
		return ""
	}
	return "(Temporal did not answer, so phases come from the ledger alone: " + classify(a.tcErr).Message + ")"
}

// readCommand makes cmd read the configured store, its first argument the
// graph: run gets a reader once check passed on the arguments (nothing is
// contacted otherwise), and a graph it does not find is storeRead's error.
func (a *app) readCommand(cmd *cobra.Command, check func(args []string) error,
	run func(cmd *cobra.Command, r *client.Reader, args []string) error) *cobra.Command {
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := check(args); err != nil {
			return err
		}
		st, err := a.openStore(cmd.Context())
		if err != nil {
			return err
		}
		return a.storeRead(run(cmd, client.NewReader(st), args), args[0])
	}
	return cmd
}

// openStore opens the configured store and checks that it answers a listing,
// so a wrong endpoint, bucket or credential shows before any work. A local
// store directory that does not exist is an error naming where the setting
// came from: the CLI never creates one (a relative default would create it
// in whatever directory the command ran in).
func (a *app) openStore(ctx context.Context) (storage.Store, error) {
	if a.store != nil {
		return a.store, nil
	}
	if a.cfg.S3.Bucket == "" {
		abs := a.storeDir()
		if info, err := os.Stat(abs); err != nil || !info.IsDir() {
			return nil, withNext(outcome.Errorf(outcome.NotFound, "", "the store directory %s does not exist (%s)",
				abs, a.settingName(conncfg.FlagStoreDir)), "%s", a.storeNext())
		}
	}
	st, err := a.cfg.OpenStore(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, storage.ErrUnavailable) {
			return nil, unavailable(err, "%s", a.storeNext())
		}
		return nil, withNext(err, "%s", a.storeNext())
	}
	a.store = st
	return st, nil
}

// settingName says where a setting's value came from: the flag or variable,
// the profile, or the default (with the value).
func (a *app) settingName(flag string) string {
	if a.src.Given(flag) {
		return "from " + a.src.Name(flag)
	}
	if f := conncfg.EnvNames()[flag]; f != "" {
		return fmt.Sprintf("the default of --%s; $%s or the profile `graft dev` writes set it", flag, f)
	}
	return "the default of --" + flag
}

func (a *app) storeDir() string {
	if abs, err := filepath.Abs(a.cfg.StoreDir); err == nil {
		return abs
	}
	return a.cfg.StoreDir
}

func (a *app) storeNext() string {
	if a.cfg.S3.Bucket == "" {
		return fmt.Sprintf("point --store-dir ($GRAFT_STORE_DIR) at the directory the workers use; this command read %s (%s)",
			a.storeDir(), a.settingName(conncfg.FlagStoreDir))
	}
	return "check that the S3 endpoint answers and the bucket exists (--s3-endpoint, --s3-bucket), " +
		"and that the AWS SDK finds credentials (AWS_ACCESS_KEY_ID, AWS_PROFILE, an instance role)"
}

// storeRead adds, to a read of graph that found no graph, which store was
// read and where that setting came from: the usual cause is a CLI and workers
// on different stores.
func (a *app) storeRead(err error, graph string) error {
	if o, _ := outcome.Of(err); o != outcome.NotFound || !strings.Contains(err.Error(), fmt.Sprintf("graph %q does not exist", graph)) {
		return err
	}
	setting := conncfg.FlagStoreDir
	if a.cfg.S3.Bucket != "" {
		setting = conncfg.FlagS3Bucket
	}
	return withNext(err, "`graft graph init %s` creates it. This command read %s (%s); if the workers use another store, point the store settings at it",
		graph, a.cfg.DescribeStore(), a.settingName(setting))
}
