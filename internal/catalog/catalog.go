package catalog

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"
)

// DefaultDatabaseURL is the local development server: trust auth, database test.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DatabaseURLEnv names the environment variable that overrides DefaultDatabaseURL.
const DatabaseURLEnv = "DATABASE_URL"

// DefaultURL returns $DATABASE_URL, or DefaultDatabaseURL when it is unset or empty.
func DefaultURL() string {
	return cmp.Or(os.Getenv(DatabaseURLEnv), DefaultDatabaseURL)
}

// Config configures Open.
type Config struct {
	// DatabaseURL is the Postgres connection string, URL or keyword/value form.
	// Defaults to $DATABASE_URL, or DefaultDatabaseURL when that is unset.
	DatabaseURL string
	// Schema holds the ledger's tables; every connection's search_path is set to it alone.
	// It must be a lower-case SQL identifier (see ValidateSchema). Defaults to "", which
	// keeps the connection's own search_path (normally public).
	Schema string
	// MaxConns bounds the connection pool. Defaults to 8.
	MaxConns int32
	// ConnectTimeout bounds each connection attempt unless the URL sets connect_timeout.
	// Defaults to 5s.
	ConnectTimeout time.Duration
}

const (
	defaultMaxConns       = 8
	defaultConnectTimeout = 5 * time.Second
)

// withDefaults is the one place defaults are applied.
func (c Config) withDefaults() Config {
	c.DatabaseURL = cmp.Or(c.DatabaseURL, DefaultURL())
	c.MaxConns = cmp.Or(c.MaxConns, defaultMaxConns)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, defaultConnectTimeout)
	return c
}

func (c Config) validate() error {
	if err := ValidateSchema(c.Schema); err != nil {
		return fmt.Errorf("%w: Config.Schema: %v", ErrInvalid, err)
	}
	if c.MaxConns < 1 {
		return fmt.Errorf("%w: Config.MaxConns must be positive, got %d", ErrInvalid, c.MaxConns)
	}
	if c.ConnectTimeout < 0 {
		return fmt.Errorf("%w: Config.ConnectTimeout must not be negative, got %s", ErrInvalid, c.ConnectTimeout)
	}
	return nil
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidateSchema checks that name is "" (the connection's default) or a lower-case SQL
// identifier of at most 63 bytes, which needs no quoting in a search_path.
func ValidateSchema(name string) error {
	if name == "" || schemaName.MatchString(name) {
		return nil
	}
	return fmt.Errorf("schema %q is not a lower-case identifier of at most 63 characters ([a-z_][a-z0-9_]*)", name)
}

// RedactURL renders a connection string as postgres://user@host:port/database, which
// never carries a password whatever form the input took. An unparseable string yields a
// placeholder.
func RedactURL(databaseURL string) string {
	cfg, err := pgconn.ParseConfig(databaseURL)
	if err != nil {
		return "(unparseable database URL)"
	}
	return describe(cfg)
}

func describe(cfg *pgconn.Config) string {
	u := url.URL{Scheme: "postgres", User: url.User(cfg.User), Path: "/" + cfg.Database}
	if strings.HasPrefix(cfg.Host, "/") {
		u.RawQuery = url.Values{"host": {cfg.Host}}.Encode()
	} else {
		u.Host = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	return u.String()
}

// NewID returns a fresh ULID string, for operation and cleanup-run ids that no workflow
// id determines.
func NewID() string {
	return ulid.MustNew(ulid.Now(), rand.Reader).String()
}

// Catalog is the ledger. It is safe for concurrent use.
type Catalog struct {
	pool   *pgxpool.Pool
	schema string
	where  string // the database, password-free, for error messages
	stats  *counter
}

// Open connects to the ledger described by cfg, checks that Postgres answers and that the
// schema has been migrated, and returns the catalog. An unreachable server yields
// ErrUnavailable naming the URL without its password; a schema without the ledger's
// tables yields ErrNotMigrated.
func Open(ctx context.Context, cfg Config) (*Catalog, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("open catalog: %w", err)
	}
	poolCfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		// pgconn redacts the password in a parse error's text.
		return nil, fmt.Errorf("open catalog: %w: Config.DatabaseURL: %s", ErrInvalid, err.Error())
	}
	poolCfg.MaxConns = cfg.MaxConns
	if cfg.Schema != "" {
		poolCfg.ConnConfig.RuntimeParams["search_path"] = cfg.Schema
	}
	if _, ok := poolCfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		poolCfg.ConnConfig.RuntimeParams["application_name"] = "graft"
	}
	if poolCfg.ConnConfig.ConnectTimeout == 0 {
		poolCfg.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	}
	stats := &counter{}
	poolCfg.ConnConfig.Tracer = stats
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("open catalog: %w", translateError(err, describe(&poolCfg.ConnConfig.Config)))
	}
	c := &Catalog{pool: pool, schema: cfg.Schema, where: describe(&poolCfg.ConnConfig.Config), stats: stats}
	if err := c.checkSchema(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open catalog: %w", err)
	}
	return c, nil
}

// checkSchema pings the server and confirms the ledger's tables are on the search_path.
func (c *Catalog) checkSchema(ctx context.Context) error {
	var migrated bool
	err := c.pool.QueryRow(ctx,
		`SELECT to_regclass('incarnations') IS NOT NULL AND to_regclass('cleanup_condemned') IS NOT NULL`,
	).Scan(&migrated)
	if err != nil {
		return c.translate(err)
	}
	if !migrated {
		return fmt.Errorf("%w: schema %q of %s has no ledger tables: run the migrations",
			ErrNotMigrated, cmp.Or(c.schema, "(default)"), c.where)
	}
	return nil
}

// Close releases every connection. The catalog must not be used afterwards.
func (c *Catalog) Close() { c.pool.Close() }

// Schema returns the schema the catalog works in ("" for the connection's default).
func (c *Catalog) Schema() string { return c.schema }

// Ping checks that Postgres answers.
func (c *Catalog) Ping(ctx context.Context) error {
	if err := c.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping catalog: %w", c.translate(err))
	}
	return nil
}

// Querier is what one statement needs: the pool and a pgx.Tx both satisfy it.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// queryAll runs one query on q and scans every row, wrapping a failure with what.
func queryAll[T any](ctx context.Context, c *Catalog, q Querier, what string, scan pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, c.wrap(what, err)
	}
	all, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, c.wrap(what, err)
	}
	return all, nil
}

// queryOne runs one single-row query on q and scans it, wrapping a failure with what.
func queryOne[T any](ctx context.Context, c *Catalog, q Querier, what string, scan func(pgx.Row) (T, error), sql string, args ...any) (T, error) {
	v, err := scan(q.QueryRow(ctx, sql, args...))
	if err != nil {
		var zero T
		return zero, c.wrap(what, err)
	}
	return v, nil
}

// scanned adapts a one-row scanner to pgx.CollectRows.
func scanned[T any](scan func(pgx.Row) (T, error)) pgx.RowToFunc[T] {
	return func(row pgx.CollectableRow) (T, error) { return scan(row) }
}

// rollbackTimeout bounds a rollback that runs after the caller's context is gone.
const rollbackTimeout = 5 * time.Second

// InTx runs fn in one transaction, for callers combining several …Tx writes. It commits
// when fn returns nil and rolls back otherwise, on a context that cannot be cancelled. fn's
// error is returned as is.
func (c *Catalog) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	_, err := inTx(ctx, c, func(tx pgx.Tx) (struct{}, error) { return struct{}{}, fn(tx) })
	return err
}

// InTxRecoverable is InTx for a transaction that records what the reconciler can derive
// again from the ledger and storage — an operation's finish, whose loss looks exactly like
// a worker that stopped between the operation's last write and its finish: the row still
// names its pending write, and the reconciler settles it (docs/operations.md, "The
// ledger's commits"). Its commit does not wait for the WAL to reach disk
// (synchronous_commit off for this transaction alone): it is visible to every session at
// once, and durable with the next flush — within wal_writer_delay, or sooner, since any
// later synchronous commit flushes the WAL up to and past it. So a crash of Postgres can
// lose such a commit only together with everything committed after it, never a record
// that a later durable one relies on. Every transaction that witnesses an effect before
// it is sent stays synchronous.
func (c *Catalog) InTxRecoverable(ctx context.Context, fn func(tx pgx.Tx) error) error {
	_, err := inTxOpts(ctx, c, recoverableTx, func(tx pgx.Tx) (struct{}, error) { return struct{}{}, fn(tx) })
	return err
}

// MarkRecoverableTx makes tx's commit one that need not wait for the WAL flush, as
// InTxRecoverable's: for a transaction that learns only after it began that what it
// records is derivable again (a finish whose pending write landed).
func (c *Catalog) MarkRecoverableTx(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit TO OFF"); err != nil {
		return c.wrap("mark transaction recoverable", err)
	}
	return nil
}

// recoverableTx begins a transaction whose commit does not wait for the WAL flush, in the
// same round trip as its BEGIN.
var recoverableTx = pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL synchronous_commit TO OFF"}

func inTx[T any](ctx context.Context, c *Catalog, fn func(tx pgx.Tx) (T, error)) (T, error) {
	return inTxOpts(ctx, c, pgx.TxOptions{}, fn)
}

func inTxOpts[T any](ctx context.Context, c *Catalog, opts pgx.TxOptions, fn func(tx pgx.Tx) (T, error)) (T, error) {
	var zero T
	tx, err := c.pool.BeginTx(ctx, opts)
	if err != nil {
		return zero, c.translate(err)
	}
	defer rollback(ctx, tx)
	v, err := fn(tx)
	if err != nil {
		return zero, err
	}
	if err := tx.Commit(ctx); err != nil {
		return zero, c.translate(err)
	}
	return v, nil
}

// rollback ends tx (or a savepoint) unless it was committed, even when ctx is cancelled.
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	// After a commit this returns pgx.ErrTxClosed; a failed rollback closes the connection,
	// which ends the transaction server-side. Neither needs reporting.
	_ = tx.Rollback(rctx)
}

// savepoint runs fn inside a savepoint of tx, so that a constraint violation in fn leaves
// tx usable for a follow-up read.
func savepoint[T any](ctx context.Context, tx pgx.Tx, fn func(sp pgx.Tx) (T, error)) (T, error) {
	var zero T
	sp, err := tx.Begin(ctx)
	if err != nil {
		return zero, err
	}
	defer rollback(ctx, sp)
	v, err := fn(sp)
	if err != nil {
		return zero, err
	}
	if err := sp.Commit(ctx); err != nil {
		return zero, err
	}
	return v, nil
}

// lockGraph takes the per-graph advisory lock for the rest of tx, exclusively: the
// cleanup side of the handshake (a run's insert and finish, CondemnedAdd). The key
// hashes the schema too, so ledgers in different schemas of one database do not contend.
func lockGraph(ctx context.Context, tx pgx.Tx, graph string) error {
	_, err := tx.Exec(ctx,
		`SELECT pg_advisory_xact_lock(hashtextextended('graft/graph/' || current_schema() || '/' || $1, 0))`,
		graph)
	return err
}

// lockGraphShared takes the same per-graph lock for the rest of tx in shared mode: the
// operations' side of the handshake (PinsRegister, PinsRelease, OperationFinish). Shared
// holders never wait for each other, so operations of one graph do not serialise on the
// ledger; each still excludes, and is excluded by, the cleanup side, which is all the
// handshake needs (doc.go): a pin and a condemnation of one graph never interleave.
func lockGraphShared(ctx context.Context, tx pgx.Tx, graph string) error {
	_, err := tx.Exec(ctx,
		`SELECT pg_advisory_xact_lock_shared(hashtextextended('graft/graph/' || current_schema() || '/' || $1, 0))`,
		graph)
	return err
}

// lockNameRoot takes, for the rest of tx, the lock of the first '/'-separated segment
// of a branch name in a graph: every pair of names of which one is a prefix of the
// other on '/' boundaries (`a`, `a/b`) shares it, and names with different first
// segments never contend.
func lockNameRoot(ctx context.Context, tx pgx.Tx, graph, logical string) error {
	root, _, _ := strings.Cut(logical, "/")
	_, err := tx.Exec(ctx,
		`SELECT pg_advisory_xact_lock(hashtextextended('graft/name/' || current_schema() || '/' || $1 || '/' || $2, 0))`,
		graph, root)
	return err
}

// wrap prefixes a translated error with a short verb phrase.
func (c *Catalog) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, c.translateOnce(err))
}

// translateOnce translates err unless it already is one of the catalog's own errors. pgx
// never wraps the catalog's sentinels, so matching one means err was built here.
func (c *Catalog) translateOnce(err error) error {
	if isCatalogError(err) {
		return err
	}
	return c.translate(err)
}

func isCatalogError(err error) bool {
	for _, s := range []error{ErrNotFound, ErrDuplicate, ErrStateConflict, ErrCondemned,
		ErrInvalid, ErrUnavailable, ErrNotMigrated, ErrNotOwner, ErrOwned} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// timeOrZero converts a nullable timestamp.
func timeOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
