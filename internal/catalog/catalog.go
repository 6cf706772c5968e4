package catalog

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"
)

const (
	// DefaultDatabaseURL is the local development server: trust auth, database test.
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	// DatabaseURLEnv names the environment variable that overrides DefaultDatabaseURL.
	DatabaseURLEnv = "DATABASE_URL"
)

// DefaultURL returns $DATABASE_URL, or DefaultDatabaseURL when it is unset or empty.
func DefaultURL() string {
	return cmp.Or(os.Getenv(DatabaseURLEnv), DefaultDatabaseURL)
}

// Config configures Open.
type Config struct {
	// DatabaseURL is the Postgres connection string; defaults to DefaultURL().
	DatabaseURL string
	// Schema holds the ledger's tables, every connection's search_path alone: a
	// lower-case SQL identifier (ValidateSchema), or "" for the connection's own.
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

// ValidateSchema checks that name is "" or a lower-case SQL identifier of at most 63
// bytes, which needs no quoting in a search_path.
func ValidateSchema(name string) error {
	if name == "" || schemaName.MatchString(name) {
		return nil
	}
	return fmt.Errorf("schema %q is not a lower-case identifier of at most 63 characters ([a-z_][a-z0-9_]*)", name)
}

// RedactURL renders a connection string as postgres://user@host:port/database, never
// with a password; an unparseable string yields a placeholder.
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

// NewID returns a fresh ULID, for ids no workflow id determines.
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

// Open connects to the ledger cfg describes and checks that the schema is migrated. An
// unreachable server is ErrUnavailable naming the URL without its password; a schema
// without the ledger's tables ErrNotMigrated.
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
	poolCfg.ConnConfig.ConnectTimeout = cmp.Or(poolCfg.ConnConfig.ConnectTimeout, cfg.ConnectTimeout)
	stats := &counter{}
	poolCfg.ConnConfig.Tracer = stats
	where := describe(&poolCfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("open catalog: %w", translateError(err, where))
	}
	c := &Catalog{pool: pool, schema: cfg.Schema, where: where, stats: stats}
	if err := c.checkSchema(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open catalog: %w", err)
	}
	return c, nil
}

// checkSchema confirms the ledger's tables are on the search_path.
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

// queryAll runs one query on q and scans every row; queryOne one row.
func queryAll[T any](ctx context.Context, c *Catalog, q Querier, what string, scan pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	rows, _ := q.Query(ctx, sql, args...) // a failed query's rows carry its error
	return wrapped[[]T](c, what)(pgx.CollectRows(rows, scan))
}

func queryOne[T any](ctx context.Context, c *Catalog, q Querier, what string, scan func(pgx.Row) (T, error), sql string, args ...any) (T, error) {
	return wrapped[T](c, what)(scan(q.QueryRow(ctx, sql, args...)))
}

// wrapped returns a func passing on a result, or the zero T and its error wrapped with what.
func wrapped[T any](c *Catalog, what string) func(T, error) (T, error) {
	return func(v T, err error) (T, error) {
		if err != nil {
			var zero T
			return zero, c.wrap(what, err)
		}
		return v, nil
	}
}

// scanned adapts a one-row scanner to pgx.CollectRows.
func scanned[T any](scan func(pgx.Row) (T, error)) pgx.RowToFunc[T] {
	return func(row pgx.CollectableRow) (T, error) { return scan(row) }
}

// rollbackTimeout bounds a rollback run after the caller's context is gone.
const rollbackTimeout = 5 * time.Second

// InTx runs fn in one transaction, for callers combining …Tx writes: it commits when fn
// returns nil and rolls back otherwise. fn's error is returned as is.
func (c *Catalog) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	_, err := inTx(ctx, c, func(tx pgx.Tx) (struct{}, error) { return struct{}{}, fn(tx) })
	return err
}

// InTxRecoverable is InTx for a transaction recording only what the reconciler can derive
// again (an operation's finish, whose loss looks like a worker that stopped just before
// it; docs/operations.md, "The ledger's commits"). Its commit does not wait for the WAL
// flush (synchronous_commit off): visible at once, durable with the next flush, which any
// later synchronous commit forces. So a Postgres crash can lose it only with everything
// committed after it. A transaction witnessing an effect before it is sent stays synchronous.
func (c *Catalog) InTxRecoverable(ctx context.Context, fn func(tx pgx.Tx) error) error {
	_, err := inTxOpts(ctx, c, recoverableTx, func(tx pgx.Tx) (struct{}, error) { return struct{}{}, fn(tx) })
	return err
}

// MarkRecoverableTx makes tx's commit InTxRecoverable's, for a transaction that learns
// after it began that what it records is derivable again.
func (c *Catalog) MarkRecoverableTx(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, "SET LOCAL synchronous_commit TO OFF")
	return c.wrap("mark transaction recoverable", err)
}

// recoverableTx turns synchronous_commit off in the round trip of its BEGIN.
var recoverableTx = pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL synchronous_commit TO OFF"}

func inTx[T any](ctx context.Context, c *Catalog, fn func(tx pgx.Tx) (T, error)) (T, error) {
	return inTxOpts(ctx, c, pgx.TxOptions{}, fn)
}

func inTxOpts[T any](ctx context.Context, c *Catalog, opts pgx.TxOptions, fn func(tx pgx.Tx) (T, error)) (T, error) {
	tx, err := c.pool.BeginTx(ctx, opts)
	if err != nil {
		var zero T
		return zero, c.translate(err)
	}
	return commit(ctx, tx, fn, c.translate)
}

// rollback ends tx (or a savepoint) unless it was committed, even when ctx is cancelled.
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(rctx) // after a commit ErrTxClosed; a failed one closes the connection
}

// savepoint runs fn in a savepoint of tx, so a constraint violation leaves tx usable.
func savepoint[T any](ctx context.Context, tx pgx.Tx, fn func(sp pgx.Tx) (T, error)) (T, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	return commit(ctx, sp, fn, func(err error) error { return err })
}

// commit runs fn in tx (or a savepoint) and commits it, rolling it back when fn fails.
// fn's error is returned as is, the commit's through translate.
func commit[T any](ctx context.Context, tx pgx.Tx, fn func(tx pgx.Tx) (T, error),
	translate func(error) error) (T, error) {
	var zero T
	defer rollback(ctx, tx)
	v, err := fn(tx)
	if err != nil {
		return zero, err
	}
	if err := tx.Commit(ctx); err != nil {
		return zero, translate(err)
	}
	return v, nil
}

// lockGraph takes the per-graph advisory lock for the rest of tx: exclusive for the
// cleanup side of the handshake, shared for the operations' side, whose holders never
// wait for each other (doc.go). The key hashes the schema too, so ledgers in different
// schemas do not contend.
func lockGraph(ctx context.Context, tx pgx.Tx, graph string, mode lockMode) error {
	_, err := tx.Exec(ctx, lockGraphSQL(mode), graph)
	return err
}

// queueLockGraph queues lockGraph's statement in b.
func queueLockGraph(b *pgx.Batch, graph string, mode lockMode) {
	b.Queue(lockGraphSQL(mode), graph)
}

func lockGraphSQL(mode lockMode) string {
	return `SELECT ` + graphLockCall(mode, "$1")
}

// graphLockCall is the call that takes the lock, in mode, of the graph named by the SQL
// expression graph: every statement that takes a graph's lock builds it here, so they all
// take the same lock.
func graphLockCall(mode lockMode, graph string) string {
	return `pg_advisory_xact_lock` + string(mode) + `(hashtextextended('graft/graph/' || current_schema() || '/' || ` + graph + `, 0))`
}

type lockMode string

const (
	exclusive lockMode = ""
	shared    lockMode = "_shared"
)

// queueLockNameRoot queues in b the statement that takes, for the rest of its
// transaction, the lock of a branch name's first '/'-separated segment, shared by every
// pair of names one of which is a prefix of the other on '/' boundaries (`a`, `a/b`).
func queueLockNameRoot(b *pgx.Batch, graph, logical string) {
	root, _, _ := strings.Cut(logical, "/")
	b.Queue(lockNameRootSQL, graph, root)
}

const lockNameRootSQL = `SELECT pg_advisory_xact_lock(hashtextextended('graft/name/' || current_schema() || '/' || $1 || '/' || $2, 0))`

// wrap prefixes err with a short verb phrase, translated unless it is the catalog's own
// (pgx never wraps the catalog's sentinels).
func (c *Catalog) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	own := []error{ErrNotFound, ErrDuplicate, ErrStateConflict, ErrCondemned,
		ErrInvalid, ErrUnavailable, ErrNotMigrated, ErrNotOwner, ErrOwned}
	if !slices.ContainsFunc(own, func(s error) bool { return errors.Is(err, s) }) {
		err = c.translate(err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// jsonArg is raw as a SQL text argument, def when raw is empty (nil, SQL NULL, when def is
// ""); raw that is not JSON is ErrInvalid: "<subject> not valid JSON".
func jsonArg(raw json.RawMessage, def, subject string) (*string, error) {
	s := cmp.Or(string(raw), def)
	switch {
	case s == "":
		return nil, nil
	case !json.Valid([]byte(s)):
		return nil, invalid("%s not valid JSON", subject)
	}
	return &s, nil
}

// timeOrZero converts a nullable timestamp.
func timeOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
