package prodtier

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/devstack"
	"github.com/graftworks/graft/internal/searchattr"
	"github.com/graftworks/graft/internal/tools"
)

// TemporalServerOptions configure a Temporal server (tools.TemporalServer, not the
// CLI's dev server) persisting to Postgres, with SQL visibility in a second database.
// Its configuration is rendered (RenderTemporalConfig) from Env: the environment
// docker-compose.yml gives the temporalio/auto-setup image, but for TemplateOverrides.
type TemporalServerOptions struct {
	// Dir holds the rendered configuration and is the server's working
	// directory, as /etc/temporal is the image's. Required.
	Dir string
	// Database and VisibilityDatabase, on the Postgres at 127.0.0.1:5432 (user
	// postgres), hold the server's state and its visibility records
	// (CreateTemporalDatabases makes them). Required.
	Database, VisibilityDatabase string
	// Env renders the config template. Defaults to DB=postgres12; DB must name a
	// Postgres plugin.
	Env map[string]string
	// DynamicConfig is the dynamic config file, written where Env's
	// DYNAMIC_CONFIG_FILE_PATH (relative to Dir; default config/dynamicconfig/graft.yaml)
	// points. Defaults to DynamicConfigYAML().
	DynamicConfig []byte
	// Namespace is registered at start, with graft's search attributes and
	// auto-setup's DEFAULT_NAMESPACE_RETENTION, 24h. Defaults to "default".
	Namespace string
	LogFile   string // receives the output; defaults to an in-memory buffer
}

// TemplateOverrides are the keys of Env the harness sets itself: where
// Postgres is, the database names, the addresses and ports every service
// binds on 127.0.0.1, and the log level. Everything else comes from Env.
var TemplateOverrides = append([]string{
	"POSTGRES_SEEDS", "DB_PORT", "POSTGRES_USER", "POSTGRES_PWD", "DBNAME", "VISIBILITY_DBNAME",
	"BIND_ON_IP", "TEMPORAL_BROADCAST_ADDRESS", "LOG_LEVEL",
}, portKeys...)

// portKeys are the template's port variables.
var portKeys = []string{
	"FRONTEND_GRPC_PORT", "FRONTEND_HTTP_PORT", "FRONTEND_MEMBERSHIP_PORT",
	"MATCHING_GRPC_PORT", "MATCHING_MEMBERSHIP_PORT", "HISTORY_GRPC_PORT", "HISTORY_MEMBERSHIP_PORT",
	"WORKER_GRPC_PORT", "WORKER_MEMBERSHIP_PORT",
}

// DynamicConfigYAML renders DynamicConfig as the server's dynamic config
// file, the form docker-compose.yml mounts.
func DynamicConfigYAML() []byte {
	var b bytes.Buffer
	for _, kv := range devstack.DynamicConfig {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "%s:\n  - value: %s\n", k, v)
	}
	return b.Bytes()
}

// TemporalServer is a running Temporal server.
type TemporalServer struct {
	*devstack.Process
	HostPort  string
	Namespace string
	o         TemporalServerOptions // resolved: ports fixed in Env, so a restart binds the same ones
}

func (o *TemporalServerOptions) defaults() error {
	if o.Dir == "" || o.Database == "" || o.VisibilityDatabase == "" {
		return errors.New("temporal server: Dir, Database and VisibilityDatabase are required")
	}
	o.Namespace = cmp.Or(o.Namespace, "default")
	if o.DynamicConfig == nil {
		o.DynamicConfig = DynamicConfigYAML()
	}
	env := map[string]string{}
	maps.Copy(env, o.Env)
	env["DB"] = cmp.Or(env["DB"], "postgres12")
	env["DYNAMIC_CONFIG_FILE_PATH"] = cmp.Or(env["DYNAMIC_CONFIG_FILE_PATH"], "config/dynamicconfig/graft.yaml")
	o.Env = env
	return nil
}

// The Postgres the server persists to.
const (
	postgresHost = "127.0.0.1"
	postgresPort = "5432"
	postgresUser = "postgres"
)

// CreateTemporalDatabases creates o's two databases and brings their schemas
// to the pinned server's version with temporal-sql-tool, the steps
// auto-setup takes: create-database, setup-schema -v 0.0, update-schema.
func CreateTemporalDatabases(ctx context.Context, o TemporalServerOptions) error {
	if err := o.defaults(); err != nil {
		return err
	}
	// The embedded schemas of the pinned server, the ones auto-setup applies for postgres12.
	for _, d := range [][2]string{{o.Database, "postgresql/v12/temporal"},
		{o.VisibilityDatabase, "postgresql/v12/visibility"}} {
		db := d[0]
		for _, step := range [][]string{
			{"create-database"},
			{"setup-schema", "--version", "0.0"},
			{"update-schema", "--schema-name", d[1]},
		} {
			if err := o.sqlTool(ctx, db, step...); err != nil {
				return fmt.Errorf("temporal schema of %s: %w", db, err)
			}
		}
	}
	return nil
}

// DropTemporalDatabases drops o's two databases with temporal-sql-tool. A
// server using them must have stopped.
func DropTemporalDatabases(ctx context.Context, o TemporalServerOptions) error {
	if err := o.defaults(); err != nil {
		return err
	}
	var errs []error
	for _, db := range []string{o.Database, o.VisibilityDatabase} {
		if err := o.sqlTool(ctx, db, "drop-database", "--force"); err != nil {
			errs = append(errs, fmt.Errorf("drop %s: %w", db, err))
		}
	}
	return errors.Join(errs...)
}

// sqlTool runs temporal-sql-tool with args on database db.
func (o TemporalServerOptions) sqlTool(ctx context.Context, db string, args ...string) error {
	bin, err := tools.TemporalSQLTool.Ensure(ctx)
	if err != nil {
		return err
	}
	args = append([]string{"--plugin", o.Env["DB"], "--endpoint", postgresHost, "--port", postgresPort,
		"--user", postgresUser, "--database", db}, args...)
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("temporal-sql-tool %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	// The tool logs an error and still exits 0 in some versions; trust neither alone.
	if bytes.Contains(out, []byte(`"level":"error"`)) || bytes.Contains(out, []byte(`"level":"fatal"`)) {
		return fmt.Errorf("temporal-sql-tool %s reported an error:\n%s", strings.Join(args, " "), out)
	}
	return nil
}

// RenderTemporalConfig renders the pinned server's docker/config_template.yaml
// with env, as the image's entrypoint renders it (dockerize's template
// functions: default, lower, split, trim).
func RenderTemporalConfig(ctx context.Context, env map[string]string) ([]byte, error) {
	bin, err := tools.TemporalServer.Ensure(ctx)
	if err != nil {
		return nil, err
	}
	// The build copies the tool's Files next to its binary, at their base names.
	src, err := os.ReadFile(filepath.Join(filepath.Dir(bin), "config_template.yaml"))
	if err != nil {
		return nil, fmt.Errorf("temporal server config template: %w", err)
	}
	tpl, err := template.New("config_template.yaml").Funcs(dockerizeFuncs).Parse(string(src))
	if err != nil {
		return nil, fmt.Errorf("temporal server config template: %w", err)
	}
	var out bytes.Buffer
	if err := tpl.Execute(&out, struct{ Env map[string]string }{env}); err != nil {
		return nil, fmt.Errorf("render temporal server config: %w", err)
	}
	return out.Bytes(), nil
}

// dockerizeFuncs are the functions of the template language the image's
// config template is written in (github.com/jwilder/dockerize).
var dockerizeFuncs = template.FuncMap{
	// default returns its first argument unless it is empty, else the second.
	"default": func(args ...any) (string, error) {
		switch len(args) {
		case 1:
			return fmt.Sprint(args[0]), nil
		case 2:
			if s := fmt.Sprint(args[0]); args[0] != nil && s != "" {
				return s, nil
			}
			return fmt.Sprint(args[1]), nil
		}
		return "", fmt.Errorf("default: want 1 or 2 arguments, got %d", len(args))
	},
	"lower": strings.ToLower,
	"split": strings.Split,
	"trim":  strings.TrimSpace,
}

// StartTemporalServer renders the server's configuration into o.Dir, starts
// the server, registers o.Namespace and graft's search attributes, and waits
// until the frontend accepts queries on them. The databases must exist
// (CreateTemporalDatabases).
func StartTemporalServer(ctx context.Context, o TemporalServerOptions) (*TemporalServer, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if db := o.Env["DB"]; db != "postgres12" && db != "postgres12_pgx" {
		return nil, fmt.Errorf("temporal server: DB=%q; the harness runs Postgres only", o.Env["DB"])
	}
	env := o.Env
	maps.Copy(env, map[string]string{
		"POSTGRES_SEEDS": postgresHost, "DB_PORT": postgresPort, "POSTGRES_USER": postgresUser, "POSTGRES_PWD": "",
		"DBNAME": o.Database, "VISIBILITY_DBNAME": o.VisibilityDatabase,
		"BIND_ON_IP": "127.0.0.1", "TEMPORAL_BROADCAST_ADDRESS": "127.0.0.1", "LOG_LEVEL": "warn",
	})
	start := func() (*TemporalServer, error) {
		for _, k := range portKeys {
			free := devstack.FreePort
			if strings.HasSuffix(k, "_MEMBERSHIP_PORT") {
				free = freeMembershipPort
			}
			p, err := free()
			if err != nil {
				return nil, fmt.Errorf("start temporal server: %w", err)
			}
			env[k] = strconv.Itoa(p)
		}
		s := &TemporalServer{HostPort: net.JoinHostPort("127.0.0.1", env["FRONTEND_GRPC_PORT"]), Namespace: o.Namespace, o: o}
		if err := s.writeConfig(ctx); err != nil {
			return nil, err
		}
		return s, s.start(ctx)
	}
	// A free port can be taken between choosing it and the server's bind.
	s, err := start()
	for try := 1; try < 3 && err != nil; try++ {
		s, err = start()
	}
	if err != nil {
		return nil, err
	}
	// The server ran: a failure now is not a port clash.
	if err := s.registerNamespace(ctx); err != nil {
		s.Stop(30 * time.Second)
		return nil, err
	}
	return s, nil
}

// freeMembershipPort finds a free TCP port on 127.0.0.1 below 32768: the
// server records membership ports in a smallint column, and the kernel's
// ephemeral ports (FreePort) lie above it.
func freeMembershipPort() (int, error) {
	for range 100 {
		p := 20000 + mrand.IntN(32768-20000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, errors.New("no free port between 20000 and 32767")
}

// writeConfig renders config/docker.yaml and the dynamic config into Dir.
func (s *TemporalServer) writeConfig(ctx context.Context) error {
	rel := filepath.FromSlash(s.o.Env["DYNAMIC_CONFIG_FILE_PATH"])
	if filepath.IsAbs(rel) {
		return fmt.Errorf("temporal server: DYNAMIC_CONFIG_FILE_PATH %q must be relative to Dir", rel)
	}
	cfg, err := RenderTemporalConfig(ctx, s.o.Env)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		path string
		body []byte
	}{{filepath.Join(s.o.Dir, rel), s.o.DynamicConfig}, {s.ConfigFile(), cfg}} {
		err := os.MkdirAll(filepath.Dir(f.path), 0o755)
		if err == nil {
			err = os.WriteFile(f.path, f.body, 0o644)
		}
		if err != nil {
			return fmt.Errorf("temporal server config: %w", err)
		}
	}
	return nil
}

// ConfigFile returns the path of the rendered server configuration.
func (s *TemporalServer) ConfigFile() string { return filepath.Join(s.o.Dir, "config", "docker.yaml") }

// start runs the server as the image does (`temporal-server --env docker
// start` in its config directory's parent) and waits for the frontend.
func (s *TemporalServer) start(ctx context.Context) error {
	bin, err := tools.TemporalServer.Ensure(ctx)
	if err != nil {
		return err
	}
	p, err := devstack.StartProcess(ctx, "temporal-server", bin, []string{"--root", s.o.Dir, "--config", "config", "--env", "docker", "start"},
		nil, s.o.LogFile, s.o.Dir, 2*time.Minute, func(ctx context.Context) error {
			c, err := client.DialContext(ctx, client.Options{HostPort: s.HostPort, Namespace: "temporal-system", Logger: devstack.QuietLogger})
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.WorkflowService().GetSystemInfo(ctx, &workflowservice.GetSystemInfoRequest{})
			return err
		})
	if err != nil {
		return err
	}
	s.Process = p
	return nil
}

// registerNamespace registers the namespace and graft's search attributes
// (each only if missing, so a restarted server keeps what it had), then waits
// until a visibility query on them is accepted.
func (s *TemporalServer) registerNamespace(ctx context.Context) error {
	c, err := client.DialContext(ctx, client.Options{HostPort: s.HostPort, Namespace: s.Namespace, Logger: devstack.QuietLogger})
	if err != nil {
		return fmt.Errorf("temporal server %s: %w", s.HostPort, err)
	}
	defer c.Close()
	// The frontend learns of a namespace and its attributes on its cache's
	// next refresh; a query naming every attribute proves it has.
	var q []string
	for _, sa := range searchattr.All {
		q = append(q, fmt.Sprintf("%s = 'probe'", sa.Name))
	}
	register := func() error {
		_, err := c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace:                        s.Namespace,
			Description:                      "graft",
			WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
		})
		var exists *serviceerror.NamespaceAlreadyExists
		if err != nil && !errors.As(err, &exists) {
			return fmt.Errorf("register namespace %s: %w", s.Namespace, err)
		}
		have, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: s.Namespace})
		if err != nil {
			return fmt.Errorf("list search attributes: %w", err)
		}
		missing := map[string]enumspb.IndexedValueType{}
		for _, sa := range searchattr.All {
			if _, ok := have.GetCustomAttributes()[sa.Name]; !ok {
				missing[sa.Name] = enumspb.IndexedValueType(enumspb.IndexedValueType_value["INDEXED_VALUE_TYPE_"+strings.ToUpper(sa.Type)])
			}
		}
		if len(missing) > 0 {
			_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
				Namespace: s.Namespace, SearchAttributes: missing,
			})
			if err == nil {
				err = errors.New("added; checking again")
			}
			return fmt.Errorf("register graft's search attributes: %w", err)
		}
		_, err = c.WorkflowService().ListWorkflowExecutions(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: s.Namespace, Query: strings.Join(q, " AND "), PageSize: 1,
		})
		if err != nil {
			return fmt.Errorf("query graft's search attributes: %w", err)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		err := register()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("temporal server %s: %w\n%s", s.HostPort, err, s.Output())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Restart stops the server gracefully and starts it again on the same ports,
// configuration and databases, waiting until it serves the namespace.
func (s *TemporalServer) Restart(ctx context.Context) error {
	s.Stop(30 * time.Second)
	if err := s.start(ctx); err != nil {
		return err
	}
	return s.registerNamespace(ctx)
}

// Env returns the environment the configuration was rendered with.
func (s *TemporalServer) Env() map[string]string { return maps.Clone(s.o.Env) }

// TestTemporalServer_OnPostgres_RestartsAndDrops: the harness creates two
// databases, starts the pinned server on them with graft's namespace and
// search attributes, restarts it on the same databases (the namespace is
// still there), stops it, and drops both databases.
func TestTemporalServer_OnPostgres_RestartsAndDrops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	db := "graft_tserver_" + randomHex(4)
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
