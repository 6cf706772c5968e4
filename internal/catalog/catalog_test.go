package catalog_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

func TestOpen_UnreachablePostgres_IsUnavailableQuicklyWithoutPassword(t *testing.T) {
	t.Parallel()
	dbURL := catalogtest.UnreachableURL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse %s: %v", dbURL, err)
	}
	start := time.Now()
	c, err := catalog.Open(ctxFor(t), catalog.Config{DatabaseURL: dbURL, ConnectTimeout: time.Second})
	if err == nil {
		c.Close()
		t.Fatal("Open on a closed port succeeded")
	}
	if !errors.Is(err, catalog.ErrUnavailable) {
		t.Fatalf("Open on a closed port: err = %v, want ErrUnavailable", err)
	}
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Errorf("Open took %s to fail, want under 3s", elapsed)
	}
	msg := err.Error()
	if strings.Contains(msg, catalogtest.UnreachablePassword) {
		t.Errorf("error %q repeats the password", msg)
	}
	if !strings.Contains(msg, "postgres://postgres@"+u.Host+"/test") {
		t.Errorf("error %q does not name postgres://postgres@%s/test", msg, u.Host)
	}
}

// silentServer accepts TCP connections and never answers, like a hung server; it stops
// when the test ends.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

func TestOpen_ServerThatNeverAnswers_IsUnavailableAfterConnectTimeout(t *testing.T) {
	t.Parallel()
	addr := silentServer(t)
	start := time.Now()
	c, err := catalog.Open(ctxFor(t), catalog.Config{
		DatabaseURL:    "postgres://postgres@" + addr + "/test?sslmode=disable",
		ConnectTimeout: 500 * time.Millisecond,
	})
	if err == nil {
		c.Close()
		t.Fatal("Open on a silent server succeeded")
	}
	if !errors.Is(err, catalog.ErrUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Open on a silent server: err = %v, want ErrUnavailable naming %s", err, addr)
	}
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Errorf("Open took %s to give up, want about the 500ms connect timeout", elapsed)
	}
}

func TestOpen_SchemaWithoutMigrations_IsNotMigrated(t *testing.T) {
	t.Parallel()
	schema := catalogtest.NewSchema(t)
	c, err := catalog.Open(ctxFor(t), catalog.Config{DatabaseURL: catalogtest.DatabaseURL(), Schema: schema})
	if err == nil {
		c.Close()
		t.Fatal("Open on an empty schema succeeded")
	}
	if !errors.Is(err, catalog.ErrNotMigrated) || !strings.Contains(err.Error(), schema) {
		t.Fatalf("Open on an empty schema: err = %v, want ErrNotMigrated naming %s", err, schema)
	}
}

func TestOpen_InvalidConfig_NamesTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   catalog.Config
		field string
	}{
		{catalog.Config{Schema: "Has-Dash"}, "Config.Schema"},
		{catalog.Config{MaxConns: -1}, "Config.MaxConns"},
		{catalog.Config{ConnectTimeout: -time.Second}, "Config.ConnectTimeout"},
		{catalog.Config{DatabaseURL: "postgres://u:hunter2@[::1"}, "Config.DatabaseURL"},
	} {
		_, err := catalog.Open(ctxFor(t), tc.cfg)
		if !errors.Is(err, catalog.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Open(%+v): err = %v, want ErrInvalid naming %s", tc.cfg, err, tc.field)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%+v): error %q repeats the password", tc.cfg, err)
		}
	}
}

func TestOpen_MigratedSchema_WorksInThatSchemaOnly(t *testing.T) {
	t.Parallel()
	a, b := catalogtest.Open(t), catalogtest.Open(t)
	if a.Schema() == b.Schema() || !strings.HasPrefix(a.Schema(), "graft_test_catalog_") {
		t.Fatalf("schemas %q and %q, want two distinct graft_test_catalog_* schemas", a.Schema(), b.Schema())
	}
	op := newOp(t, a, catalog.OpCreateBranch, "g")
	if _, err := b.OperationGet(ctxFor(t), catalog.OperationGetParams{ID: op.ID}); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("operation of schema %s seen from %s: err = %v, want ErrNotFound", a.Schema(), b.Schema(), err)
	}
	if err := a.Ping(ctxFor(t)); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func TestRedactURL_PasswordInAnyForm_IsDropped(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://alice:s3cret@db.example:6543/ledger?sslmode=disable": "postgres://alice@db.example:6543/ledger",
		"host=10.0.0.1 port=5433 user=bob password=s3cret dbname=x":      "postgres://bob@10.0.0.1:5433/x",
	} {
		if got := catalog.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestInTx_FnFails_RollsBackEveryWrite(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	id := catalog.NewID()
	boom := errors.New("boom")
	err := c.InTx(ctxFor(t), func(tx pgx.Tx) error {
		if _, err := c.OperationInsertTx(ctxFor(t), tx, catalog.OperationInsertParams{ID: id, Kind: catalog.OpTag, Graph: "g"}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx: err = %v, want fn's error", err)
	}
	if _, err := c.OperationGet(ctxFor(t), catalog.OperationGetParams{ID: id}); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("operation after rollback: err = %v, want ErrNotFound", err)
	}
}

func TestInTx_ContextCancelledMidTransaction_LeavesNoTransactionOpen(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	id := catalog.NewID()
	ctx, cancel := context.WithCancel(ctxFor(t))
	err := c.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := c.OperationInsertTx(ctx, tx, catalog.OperationInsertParams{ID: id, Kind: catalog.OpTag, Graph: "g"}); err != nil {
			return err
		}
		cancel()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("InTx: err = %v, want context.Canceled", err)
	}
	// An open transaction would hold the row's insert lock and block this insert.
	short, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if _, err := c.OperationInsert(short, catalog.OperationInsertParams{ID: id, Kind: catalog.OpTag, Graph: "g"}); err != nil {
		t.Fatalf("insert the same id after the cancelled transaction: %v", err)
	}
}
