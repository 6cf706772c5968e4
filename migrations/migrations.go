// Package migrations holds the ledger's schema as embedded, numbered SQL files and applies
// them with goose.
//
// Invariants:
//   - Versions are 1, 2, 3, … with no gaps and no duplicates; a set that breaks this is
//     rejected before anything touches the database.
//   - Each migration runs in its own transaction together with its version row (goose's
//     default), so a failed migration leaves the schema at the previous version.
//   - A migration missing from the database while a later one is applied, or a database
//     that records a version this binary does not know, is an error, never skipped.
//   - Concurrent appliers of the same schema serialise on a session advisory lock derived
//     from the schema name.
//   - Every object, goose's version table included, lives in the schema named by the
//     connection's search_path: the given schema, or the connection's default when "".
package migrations

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/graftworks/graft/internal/catalog"
)

//go:embed *.sql
var embedded embed.FS

// defaultConnectTimeout bounds a connection attempt when the URL sets no connect_timeout.
const defaultConnectTimeout = 5 * time.Second

// Apply brings the schema named by schema ("" means the connection's default, normally
// public) up to date, creating the schema if it is missing. It returns the versions it
// applied, in order; none when the schema was already current. databaseURL "" means
// catalog.DefaultURL(). An unreachable server yields an error wrapping
// catalog.ErrUnavailable.
func Apply(ctx context.Context, databaseURL string, schema string) ([]int64, error) {
	return apply(ctx, databaseURL, schema, embedded)
}

// Report is the state of one schema's migrations, for an operator's `migrate status`.
type Report struct {
	Schema     string            `json:"schema"`     // the schema inspected ("" is the connection's default)
	Current    int64             `json:"current"`    // the highest version applied; 0 when none is
	Latest     int64             `json:"latest"`     // the highest version this binary embeds
	Migrations []MigrationStatus `json:"migrations"` // every embedded migration, ascending
}

// MigrationStatus is one migration's state in one schema.
type MigrationStatus struct {
	Version   int64     `json:"version"`
	Name      string    `json:"name"`
	Applied   bool      `json:"applied"`
	AppliedAt time.Time `json:"applied_at,omitzero"`
}

// Pending counts the migrations not yet applied.
func (r Report) Pending() int {
	n := 0
	for _, m := range r.Migrations {
		if !m.Applied {
			n++
		}
	}
	return n
}

// String renders the report as a small table, one migration per line.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schema %s: version %d of %d\n", cmp.Or(r.Schema, "(default)"), r.Current, r.Latest)
	for _, m := range r.Migrations {
		state := "pending"
		if m.Applied {
			state = "applied " + m.AppliedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(&b, "%5d  %-32s  %s\n", m.Version, m.Name, state)
	}
	return b.String()
}

// Status reports which embedded migrations the schema has applied. It reads the version
// table (creating an empty one if missing, as goose does) and changes nothing else.
func Status(ctx context.Context, databaseURL string, schema string) (Report, error) {
	return status(ctx, databaseURL, schema, embedded)
}

// Latest returns the highest version this binary embeds.
func Latest() int64 {
	versions, err := validateVersions(embedded)
	if err != nil || len(versions) == 0 {
		return 0
	}
	return versions[len(versions)-1]
}

func apply(ctx context.Context, databaseURL, schema string, fsys fs.FS) ([]int64, error) {
	s, err := open(ctx, databaseURL, schema, fsys)
	if err != nil {
		return nil, fmt.Errorf("apply migrations: %w", err)
	}
	defer s.db.Close()
	results, err := s.provider.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("apply migrations: %w", s.translate(ctx, err))
	}
	applied := make([]int64, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}

func status(ctx context.Context, databaseURL, schema string, fsys fs.FS) (Report, error) {
	s, err := open(ctx, databaseURL, schema, fsys)
	if err != nil {
		return Report{}, fmt.Errorf("migration status: %w", err)
	}
	defer s.db.Close()
	list, err := s.provider.Status(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("migration status: %w", s.translate(ctx, err))
	}
	r := Report{Schema: schema, Latest: s.latest}
	for _, m := range list {
		ms := MigrationStatus{
			Version:   m.Source.Version,
			Name:      strings.TrimSuffix(path.Base(m.Source.Path), ".sql"),
			Applied:   m.State == goose.StateApplied,
			AppliedAt: m.AppliedAt,
		}
		if ms.Applied {
			r.Current = max(r.Current, ms.Version)
		}
		r.Migrations = append(r.Migrations, ms)
	}
	return r, nil
}

// session is one connection pool plus the goose provider bound to it.
type session struct {
	db       *sql.DB
	provider *goose.Provider
	where    string // the database, password-free, for error messages
	latest   int64
}

// open validates the migration set, connects with search_path set to schema, creates the
// schema when missing, refuses a database newer than fsys, and builds the provider.
func open(ctx context.Context, databaseURL, schema string, fsys fs.FS) (*session, error) {
	versions, err := validateVersions(fsys)
	if err != nil {
		return nil, err
	}
	if err := catalog.ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("%w: schema: %v", catalog.ErrInvalid, err)
	}
	databaseURL = cmp.Or(databaseURL, catalog.DefaultURL())
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		// pgconn redacts the password in a parse error's text.
		return nil, fmt.Errorf("%w: database URL: %s", catalog.ErrInvalid, err.Error())
	}
	if schema != "" {
		cfg.RuntimeParams["search_path"] = schema
	}
	cfg.ConnectTimeout = cmp.Or(cfg.ConnectTimeout, defaultConnectTimeout)
	s := &session{db: stdlib.OpenDB(*cfg), where: catalog.RedactURL(databaseURL),
		latest: versions[len(versions)-1]}
	if err := s.prepare(ctx, schema, fsys); err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

func (s *session) prepare(ctx context.Context, schema string, fsys fs.FS) error {
	if err := s.db.PingContext(ctx); err != nil {
		return s.translate(ctx, err)
	}
	if schema != "" {
		if err := s.createSchema(ctx, schema); err != nil {
			return err
		}
	}
	// Poll the lock each second for up to five minutes.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID(schema)), lock.WithLockTimeout(1, 300))
	if err != nil {
		return fmt.Errorf("build migration lock: %w", err)
	}
	s.provider, err = goose.NewProvider(goose.DialectPostgres, s.db, fsys,
		goose.WithSessionLocker(locker),
		goose.WithAllowOutofOrder(false),
		goose.WithDisableGlobalRegistry(true),
		goose.WithLogger(goose.NopLogger()),
	)
	if err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	current, err := s.provider.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("read schema version: %w", s.translate(ctx, err))
	}
	if current > s.latest {
		return fmt.Errorf("schema %q is at version %d, newer than this binary's %d: upgrade graft",
			cmp.Or(schema, "(default)"), current, s.latest)
	}
	return nil
}

// createSchema creates schema if missing. Two appliers racing here may both pass
// IF NOT EXISTS; the loser's duplicate error means the schema now exists, which is the goal.
func (s *session) createSchema(ctx context.Context, schema string) error {
	_, err := s.db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P06") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create schema %q: %w", schema, s.translate(ctx, err))
	}
	return nil
}

// translate turns a driver or goose error into one that names the database without its
// password, wraps catalog.ErrUnavailable when the server could not be reached, keeps context
// errors, and carries no pgx error type.
func (s *session) translate(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if catalog.Unreachable(err) {
		return fmt.Errorf("%w: %s: %s", catalog.ErrUnavailable, s.where, err.Error())
	}
	return errors.New(err.Error())
}

// lockID derives the advisory lock that serialises appliers of one schema, so that
// appliers of different schemas (parallel test packages) never wait on each other.
func lockID(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("graft/migrations/" + schema))
	return int64(h.Sum64())
}

// validateVersions returns the migration versions in fsys, ascending, after checking they
// are exactly 1..n. goose itself rejects duplicates but accepts gaps; a gap usually means a
// file lost in a merge, so it is refused here.
func validateVersions(fsys fs.FS) ([]int64, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	byVersion := make(map[int64]string, len(names))
	var versions []int64
	for _, name := range names {
		v, err := goose.NumericComponent(name)
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		if other, dup := byVersion[v]; dup {
			return nil, fmt.Errorf("duplicate migration version %d: %s and %s", v, other, name)
		}
		byVersion[v] = name
		versions = append(versions, v)
	}
	if len(versions) == 0 {
		return nil, errors.New("no migrations found")
	}
	slices.Sort(versions)
	for i, v := range versions {
		if want := int64(i + 1); v != want {
			return nil, fmt.Errorf("migration versions have a gap: want version %d, found %s", want, byVersion[v])
		}
	}
	return versions, nil
}
