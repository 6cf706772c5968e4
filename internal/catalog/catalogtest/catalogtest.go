// Package catalogtest gives tests a real, migrated, isolated ledger: each call makes a
// fresh schema named graft_test_<package>_<random> in the database at DatabaseURL(),
// and t.Cleanup drops it with everything in it, so a test leaves nothing behind and tests
// of different packages never see each other's rows.
package catalogtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/migrations"
)

// DatabaseURL returns $DATABASE_URL, or the local default server.
func DatabaseURL() string { return catalog.DefaultURL() }

// setupTimeout bounds creating, migrating and dropping a test schema.
const setupTimeout = time.Minute

// Open returns a catalog on a freshly migrated schema of its own, closed and dropped when
// the test ends.
func Open(t testing.TB) *catalog.Catalog {
	t.Helper()
	schema := NewSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if _, err := migrations.Apply(ctx, DatabaseURL(), schema); err != nil {
		t.Fatalf("migrate test schema %s: %v", schema, err)
	}
	c, err := catalog.Open(ctx, catalog.Config{DatabaseURL: DatabaseURL(), Schema: schema, MaxConns: 16})
	if err != nil {
		t.Fatalf("open catalog on %s: %v", schema, err)
	}
	t.Cleanup(c.Close) // runs before the schema drop registered earlier
	return c
}

// NewSchema creates an empty schema and returns its name; t.Cleanup drops it (CASCADE).
func NewSchema(t testing.TB) string {
	t.Helper()
	schema := schemaName()
	if err := execSetup("CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		if err := execSetup("DROP SCHEMA IF EXISTS " + pgx.Identifier{schema}.Sanitize() + " CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// execSetup runs one statement on a connection of its own, within setupTimeout.
func execSetup(sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, DatabaseURL())
	if err != nil {
		return fmt.Errorf("connect to %s: %w", catalog.RedactURL(DatabaseURL()), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// UnreachablePassword is the password UnreachableURL carries, so a test can check that no
// error message repeats it.
const UnreachablePassword = "not-a-real-password"

// UnreachableURL returns a database URL whose port nothing listens on (it was free a
// moment ago), with password UnreachablePassword and a two-second connect timeout.
func UnreachableURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatalf("close probe listener: %v", err)
	}
	return "postgres://postgres:" + UnreachablePassword + "@" + addr + "/test?sslmode=disable&connect_timeout=2"
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// schemaName is graft_test_<package>_<random>, the package taken from the test binary's
// name (catalog.test → catalog), within Postgres's 63-byte identifier limit.
func schemaName() string {
	pkg := strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
	pkg = nonIdent.ReplaceAllString(strings.ToLower(pkg), "_")
	if len(pkg) > 32 {
		pkg = pkg[:32]
	}
	return "graft_test_" + pkg + "_" + strings.ToLower(rand.Text()[:12])
}
