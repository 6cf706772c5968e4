package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/graftworks/graft/cmd/internal/conncfg"
	"github.com/graftworks/graft/internal/catalog"
)

func envOf(m map[string]string) conncfg.LookupEnv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func resolveArgs(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	c := defaultConfig()
	fs := pflag.NewFlagSet("graft", pflag.ContinueOnError)
	addGlobalFlags(fs, &c)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	_, err := resolveConfig(fs, &c, envOf(env))
	return c, err
}

func TestResolveConfig_FlagBeatsEnvironmentBeatsDefault(t *testing.T) {
	c, err := resolveArgs(t, []string{"--namespace", "from-flag"}, map[string]string{
		"GRAFT_NAMESPACE": "from-env", "GRAFT_TASK_QUEUE": "q-env", "GRAFT_DIAL_TIMEOUT": "3s",
		"DATABASE_URL": "postgres://u@db:5432/ledger", "GRAFT_S3_BUCKET": "b", "GRAFT_S3_PATH_STYLE": "true",
		"GRAFT_STORE_DIR": "", // empty counts as unset
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "from-flag" || c.TaskQueue != "q-env" || c.DialTimeout != 3*time.Second ||
		c.DatabaseURL != "postgres://u@db:5432/ledger" || c.S3.Bucket != "b" || !c.S3.PathStyle {
		t.Fatalf("resolved %+v", c)
	}
	if c.TemporalAddress != "127.0.0.1:7233" || c.StoreDir != "./.graft-data" || c.Output != outputText {
		t.Fatalf("defaults not kept: %+v", c)
	}
	d, err := resolveArgs(t, nil, nil)
	if err != nil || d.DatabaseURL != catalog.DefaultDatabaseURL {
		t.Fatalf("default database %q, err %v", d.DatabaseURL, err)
	}
}

func TestResolveConfig_EveryBadValueIsNamedAsTheOperatorGaveIt(t *testing.T) {
	_, err := resolveArgs(t, []string{"--task-queue", " ", "--s3-endpoint", "ftp://x"}, map[string]string{
		"GRAFT_NAMESPACE": "", "GRAFT_TEMPORAL_ADDRESS": "nocolon", "GRAFT_DB_SCHEMA": "Bad-Schema",
		"GRAFT_OUTPUT": "xml", "DATABASE_URL": "postgres://u:pw@host:notaport/db",
	})
	if err == nil {
		t.Fatal("bad configuration accepted")
	}
	for _, want := range []string{
		`GRAFT_TEMPORAL_ADDRESS: want host:port, got "nocolon"`,
		"--task-queue: must not be empty",
		"GRAFT_DB_SCHEMA: ",
		`GRAFT_OUTPUT: want text or json, got "xml"`,
		"DATABASE_URL: ",
		"--s3-endpoint needs --s3-bucket",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), ":pw@") {
		t.Errorf("error shows the database password:\n%v", err)
	}
}

func TestTryCommand_AddsOnlyTheFlagsANonDefaultStackNeeds(t *testing.T) {
	a := &app{cfg: defaultConfig()}
	if got := a.tryCommand("127.0.0.1:7233"); got != "graft graph init demo" {
		t.Errorf("default stack: %q", got)
	}
	a.cfg.StoreDir = "/data/g"
	if got := a.tryCommand("127.0.0.1:40001"); got != "graft --temporal-address 127.0.0.1:40001 --store-dir /data/g graph init demo" {
		t.Errorf("moved stack: %q", got)
	}
	a.cfg.StoreDir, a.cfg.DBSchema = "rel/store", "graft_dev"
	abs, _ := filepath.Abs("rel/store")
	if got := a.tryCommand("127.0.0.1:7233"); got != "graft --store-dir "+abs+" --db-schema graft_dev graph init demo" {
		t.Errorf("relative store and a schema: %q, want the absolute path and --db-schema carried over", got)
	}
}

// writeFile writes body to a new file under t's temporary directory.
func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestResolveConfig_Profile_FillsWhatFlagsAndVariablesLeaveUnset(t *testing.T) {
	prof := writeFile(t, "config.json", `{"temporal-address": "10.0.0.1:7233", "store-dir": "/srv/graft", "db-schema": "graft_dev",
		"task-queue": "q-profile", "database-url": "postgres://p@db:5432/ledger"}`)
	c, err := resolveArgs(t, []string{"--task-queue", "q-flag"}, map[string]string{"GRAFT_CONFIG": prof, "GRAFT_DB_SCHEMA": "from_env"})
	if err != nil {
		t.Fatal(err)
	}
	if c.TemporalAddress != "10.0.0.1:7233" || c.StoreDir != "/srv/graft" || c.DatabaseURL != "postgres://p@db:5432/ledger" {
		t.Errorf("profile not applied: %+v", c)
	}
	if c.TaskQueue != "q-flag" || c.DBSchema != "from_env" {
		t.Errorf("flag or variable lost to the profile: %+v", c)
	}
	c, err = resolveArgs(t, nil, map[string]string{"GRAFT_CONFIG": prof, "DATABASE_URL": "postgres://e@env:5432/x"})
	if err != nil || c.DatabaseURL != "postgres://e@env:5432/x" {
		t.Errorf("DATABASE_URL did not win over the profile: %q, %v", c.DatabaseURL, err)
	}
	// Found without a flag or variable: under $HOME.
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".config", "graft"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".config", "graft", "config.json"), []byte(`{"db-schema": "from_home"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := resolveArgs(t, nil, map[string]string{"HOME": home}); err != nil || c.DBSchema != "from_home" {
		t.Errorf("profile under $HOME: schema %q, %v", c.DBSchema, err)
	}
	if c, err := resolveArgs(t, nil, map[string]string{"HOME": home, "GRAFT_CONFIG": ""}); err != nil || c.DBSchema != "" {
		t.Errorf("GRAFT_CONFIG empty turns the profile off: schema %q, %v", c.DBSchema, err)
	}
}

func TestResolveConfig_BadProfile_ErrorNamesTheFileAndTheSetting(t *testing.T) {
	bad := writeFile(t, "config.json", `{"dial-timeout": "soon", "temporal-adress": "x:1"}`)
	_, err := resolveArgs(t, nil, map[string]string{"GRAFT_CONFIG": bad})
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "temporal-adress") {
		t.Fatalf("unknown key: %v", err)
	}
	bad = writeFile(t, "config.json", `{"dial-timeout": "soon"}`)
	_, err = resolveArgs(t, nil, map[string]string{"GRAFT_CONFIG": bad})
	if err == nil || !strings.Contains(err.Error(), "dial-timeout in profile "+bad) {
		t.Fatalf("bad value: %v", err)
	}
	bad = writeFile(t, "config.json", `{"temporal-address": "nocolon"}`)
	_, err = resolveArgs(t, nil, map[string]string{"GRAFT_CONFIG": bad})
	if err == nil || !strings.Contains(err.Error(), "temporal-address (profile "+bad+"): want host:port") {
		t.Fatalf("bad address from the profile: %v", err)
	}
}
