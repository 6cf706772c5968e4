package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/graftworks/graft/internal/catalog"
)

func envOf(m map[string]string) LookupEnv {
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
	return c, resolveConfig(fs, &c, envOf(env))
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
}
