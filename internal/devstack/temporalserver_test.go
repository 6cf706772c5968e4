package devstack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.yaml.in/yaml/v3"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/searchattr"
)

// TestTemporalServer_OnPostgres_RestartsAndDrops: the harness creates two
// databases, starts the pinned server on them with graft's namespace and
// search attributes, restarts it on the same databases (the namespace is
// still there), stops it, and drops both databases.
func TestTemporalServer_OnPostgres_RestartsAndDrops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var b [4]byte
	rand.Read(b[:])
	db := "graft_devstack_" + hex.EncodeToString(b[:])
	o := TemporalServerOptions{Dir: t.TempDir(), Database: db, VisibilityDatabase: db + "_visibility", Namespace: "graft-test"}
	if err := CreateTemporalDatabases(ctx, o); err != nil {
		t.Fatal(err)
	}
	dropped := false
	t.Cleanup(func() {
		if !dropped {
			_ = DropTemporalDatabases(context.Background(), o)
		}
	})
	s, err := StartTemporalServer(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(30 * time.Second) })

	// The rendered configuration is Postgres persistence and SQL visibility
	// in the two databases, every service on 127.0.0.1.
	var cfg struct {
		Persistence struct {
			Datastores map[string]struct {
				SQL struct {
					PluginName   string `yaml:"pluginName"`
					DatabaseName string `yaml:"databaseName"`
				} `yaml:"sql"`
			} `yaml:"datastores"`
		} `yaml:"persistence"`
	}
	raw, err := os.ReadFile(s.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("rendered config: %v", err)
	}
	ds := cfg.Persistence.Datastores
	if ds["default"].SQL.PluginName != "postgres12" || ds["default"].SQL.DatabaseName != db ||
		ds["visibility"].SQL.PluginName != "postgres12" || ds["visibility"].SQL.DatabaseName != db+"_visibility" {
		t.Fatalf("rendered datastores %+v, want postgres12 on %s and %s_visibility", ds, db, db)
	}
	if strings.Contains(string(raw), "0.0.0.0") {
		t.Fatalf("rendered config binds 0.0.0.0:\n%s", raw)
	}

	check := func(when string) {
		t.Helper()
		c, err := client.DialContext(ctx, client.Options{HostPort: s.HostPort, Namespace: s.Namespace})
		if err != nil {
			t.Fatalf("%s: dial: %v", when, err)
		}
		defer c.Close()
		info, err := c.WorkflowService().GetSystemInfo(ctx, &workflowservice.GetSystemInfoRequest{})
		if err != nil || info.GetServerVersion() != "1.29.1" {
			t.Fatalf("%s: server version %q (%v), want 1.29.1", when, info.GetServerVersion(), err)
		}
		sas, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: s.Namespace})
		if err != nil {
			t.Fatalf("%s: list search attributes: %v", when, err)
		}
		for _, sa := range searchattr.All {
			if got := sas.GetCustomAttributes()[sa.Name]; got != enumspb.INDEXED_VALUE_TYPE_KEYWORD {
				t.Errorf("%s: search attribute %s is %q, want Keyword", when, sa.Name, got)
			}
		}
	}
	check("after start")
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	check("after restart")
	s.Stop(30 * time.Second)
	if !s.Exited() {
		t.Fatal("server still running after Stop")
	}
	if err := DropTemporalDatabases(ctx, o); err != nil {
		t.Fatal(err)
	}
	dropped = true
	conn, err := pgx.Connect(ctx, catalog.DefaultURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1 OR datname = $2", db, db+"_visibility").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d of the server's databases left after drop (%v)", n, err)
	}
}
