package migrations_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/migrations"
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// tablesIn lists the tables of schema, by name.
func tablesIn(t *testing.T, schema string) []string {
	t.Helper()
	ctx := ctxFor(t)
	conn, err := pgx.Connect(ctx, catalogtest.DatabaseURL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename`, schema)
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	return names
}

func dropSchema(t *testing.T, schema string) {
	t.Helper()
	ctx := ctxFor(t)
	conn, err := pgx.Connect(ctx, catalogtest.DatabaseURL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Fatalf("drop schema: %v", err)
	}
}

var ledgerTables = []string{"branch_rules", "cleanup_condemned", "cleanup_runs", "goose_db_version", "graphs", "incarnations", "merge_reviews", "op_pins", "operations"}

func TestApply_MissingSchema_CreatesItAndAppliesEveryVersion(t *testing.T) {
	schema := catalogtest.NewSchema(t)
	dropSchema(t, schema) // Apply must create it

	applied, err := migrations.Apply(ctxFor(t), catalogtest.DatabaseURL(), schema)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if want := []int64{1, 2, 3, 4}; !slices.Equal(applied, want) {
		t.Errorf("applied %v, want %v", applied, want)
	}
	if got := tablesIn(t, schema); !slices.Equal(got, ledgerTables) {
		t.Errorf("tables %v, want %v", got, ledgerTables)
	}
	if got := migrations.Latest(); got != 4 {
		t.Errorf("Latest() = %d, want 4", got)
	}
}

func TestApply_SecondRun_AppliesNothing(t *testing.T) {
	schema := catalogtest.NewSchema(t)
	if _, err := migrations.Apply(ctxFor(t), catalogtest.DatabaseURL(), schema); err != nil {
		t.Fatalf("first Apply: %v", err)
	}
	applied, err := migrations.Apply(ctxFor(t), catalogtest.DatabaseURL(), schema)
	if err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	if len(applied) != 0 {
		t.Errorf("second Apply applied %v, want nothing", applied)
	}
	report, err := migrations.Status(ctxFor(t), catalogtest.DatabaseURL(), schema)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if report.Current != migrations.Latest() || report.Pending() != 0 {
		t.Errorf("status after two runs: current %d pending %d, want current %d pending 0",
			report.Current, report.Pending(), migrations.Latest())
	}
}

func TestApply_ConcurrentAppliers_ApplyEachVersionOnce(t *testing.T) {
	schema := catalogtest.NewSchema(t)
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		all []int64
	)
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			applied, err := migrations.Apply(ctxFor(t), catalogtest.DatabaseURL(), schema)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			all = append(all, applied...)
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent Apply: %v", err)
	}
	if want := []int64{1, 2, 3, 4}; !slices.Equal(all, want) {
		t.Errorf("versions applied across appliers %v, want %v exactly once", all, want)
	}
}

const (
	createA = "-- +goose Up\nCREATE TABLE a (id int);\n-- +goose Down\nDROP TABLE a;\n"
	createB = "-- +goose Up\nCREATE TABLE b (id int);\n-- +goose Down\nDROP TABLE b;\n"
)

func TestApply_GapInVersions_IsRejectedBeforeTouchingTheDatabase(t *testing.T) {
	schema := catalogtest.NewSchema(t)
	fsys := fstest.MapFS{
		"00001_a.sql": {Data: []byte(createA)},
		"00003_b.sql": {Data: []byte(createB)},
	}
	_, err := migrations.ApplyFS(ctxFor(t), catalogtest.DatabaseURL(), schema, fsys)
	if err == nil || !strings.Contains(err.Error(), "gap") {
		t.Fatalf("Apply with versions 1 and 3: err = %v, want a gap error", err)
	}
	if got := tablesIn(t, schema); len(got) != 0 {
		t.Errorf("rejected set left tables %v", got)
	}
}

func TestApply_DuplicateVersion_IsRejected(t *testing.T) {
	schema := catalogtest.NewSchema(t)
	fsys := fstest.MapFS{
		"00001_a.sql":     {Data: []byte(createA)},
		"00001_again.sql": {Data: []byte(createB)},
	}
	_, err := migrations.ApplyFS(ctxFor(t), catalogtest.DatabaseURL(), schema, fsys)
	if err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Fatalf("Apply with version 1 twice: err = %v, want a duplicate error", err)
	}
	if got := tablesIn(t, schema); len(got) != 0 {
		t.Errorf("rejected set left tables %v", got)
	}
}

func TestApply_DatabaseNewerThanMigrations_IsRejected(t *testing.T) {
	schema := catalogtest.NewSchema(t)
	both := fstest.MapFS{
		"00001_a.sql": {Data: []byte(createA)},
		"00002_b.sql": {Data: []byte(createB)},
	}
	if _, err := migrations.ApplyFS(ctxFor(t), catalogtest.DatabaseURL(), schema, both); err != nil {
		t.Fatalf("Apply 1..2: %v", err)
	}
	older := fstest.MapFS{"00001_a.sql": {Data: []byte(createA)}}
	_, err := migrations.ApplyFS(ctxFor(t), catalogtest.DatabaseURL(), schema, older)
	if err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Apply 1 on a schema at 2: err = %v, want a newer-schema error", err)
	}
}

func TestApply_FailingMigration_LeavesSchemaAtPreviousVersion(t *testing.T) {
	schema := catalogtest.NewSchema(t)
	fsys := fstest.MapFS{
		"00001_a.sql": {Data: []byte(createA)},
		// b is created, then the statement after it fails: the transaction must undo b.
		"00002_b.sql": {Data: []byte("-- +goose Up\nCREATE TABLE b (id int);\nSELECT no_such_function();\n-- +goose Down\nDROP TABLE b;\n")},
	}
	applied, err := migrations.ApplyFS(ctxFor(t), catalogtest.DatabaseURL(), schema, fsys)
	if err == nil {
		t.Fatalf("Apply with a failing migration succeeded, applied %v", applied)
	}
	if got, want := tablesIn(t, schema), []string{"a", "goose_db_version"}; !slices.Equal(got, want) {
		t.Errorf("tables after failed migration %v, want %v", got, want)
	}
	report, err := migrations.StatusFS(ctxFor(t), catalogtest.DatabaseURL(), schema, fsys)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if report.Current != 1 || report.Pending() != 1 {
		t.Errorf("status current %d pending %d, want current 1 pending 1", report.Current, report.Pending())
	}
}

func TestStatus_PartlyMigratedSchema_ListsAppliedAndPending(t *testing.T) {
	schema := catalogtest.NewSchema(t)
	one := fstest.MapFS{"00001_a.sql": {Data: []byte(createA)}}
	if _, err := migrations.ApplyFS(ctxFor(t), catalogtest.DatabaseURL(), schema, one); err != nil {
		t.Fatalf("Apply 1: %v", err)
	}
	two := fstest.MapFS{
		"00001_a.sql": {Data: []byte(createA)},
		"00002_b.sql": {Data: []byte(createB)},
	}
	report, err := migrations.StatusFS(ctxFor(t), catalogtest.DatabaseURL(), schema, two)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if report.Schema != schema || report.Current != 1 || report.Latest != 2 || len(report.Migrations) != 2 {
		t.Fatalf("report %+v, want schema %s current 1 latest 2 with two migrations", report, schema)
	}
	first, second := report.Migrations[0], report.Migrations[1]
	if first.Version != 1 || first.Name != "00001_a" || !first.Applied || first.AppliedAt.IsZero() {
		t.Errorf("first migration %+v, want version 1 named 00001_a, applied with a time", first)
	}
	if second.Version != 2 || second.Applied {
		t.Errorf("second migration %+v, want version 2 pending", second)
	}
	if text := report.String(); !strings.Contains(text, "00002_b") || !strings.Contains(text, "pending") {
		t.Errorf("String() = %q, want it to show 00002_b pending", text)
	}
}

func TestDown_ThenApply_RestoresTheSchema(t *testing.T) {
	schema := catalogtest.NewSchema(t)
	if _, err := migrations.Apply(ctxFor(t), catalogtest.DatabaseURL(), schema); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := migrations.DownAll(ctxFor(t), catalogtest.DatabaseURL(), schema); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	if got, want := tablesIn(t, schema), []string{"goose_db_version"}; !slices.Equal(got, want) {
		t.Errorf("tables after down %v, want only %v", got, want)
	}
	applied, err := migrations.Apply(ctxFor(t), catalogtest.DatabaseURL(), schema)
	if err != nil || !slices.Equal(applied, []int64{1, 2, 3, 4}) {
		t.Fatalf("Apply after down: applied %v, err %v; want [1 2 3 4]", applied, err)
	}
}

func TestApply_UnreachablePostgres_IsUnavailableWithoutPassword(t *testing.T) {
	dbURL := catalogtest.UnreachableURL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse %s: %v", dbURL, err)
	}
	start := time.Now()
	_, err = migrations.Apply(ctxFor(t), dbURL, "graft_unreachable")
	if !errors.Is(err, catalog.ErrUnavailable) {
		t.Fatalf("Apply on a closed port: err = %v, want ErrUnavailable", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("Apply took %s to fail, want under 5s", elapsed)
	}
	if strings.Contains(err.Error(), catalogtest.UnreachablePassword) {
		t.Errorf("error %q repeats the password", err)
	}
	if !strings.Contains(err.Error(), u.Host) {
		t.Errorf("error %q does not name the server %s", err, u.Host)
	}
}

func TestApply_InvalidSchemaName_IsInvalid(t *testing.T) {
	_, err := migrations.Apply(ctxFor(t), catalogtest.DatabaseURL(), "Robert'); DROP TABLE students;--")
	if !errors.Is(err, catalog.ErrInvalid) {
		t.Fatalf("Apply with a hostile schema name: err = %v, want ErrInvalid", err)
	}
}
