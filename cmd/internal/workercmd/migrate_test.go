package workercmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/migrations"
)

// execute runs the command line in-process against the test database.
func execute(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Execute(context.Background(), args,
		envMap(map[string]string{"DATABASE_URL": catalogtest.DatabaseURL()}), &out, &errb)
	return code, out.String(), errb.String()
}

func TestMigrate_FreshSchema_StatusPendingThenAppliedThenCurrent(t *testing.T) {
	schema := catalogtest.NewSchema(t)
	latest := migrations.Latest()

	code, out, errs := execute(t, "migrate", "status", "--db-schema", schema, "-o", "json")
	if code != ExitOK {
		t.Fatalf("migrate status: exit %d, stderr %s", code, errs)
	}
	var before migrations.Report
	if err := json.Unmarshal([]byte(out), &before); err != nil {
		t.Fatalf("migrate status JSON %q: %v", out, err)
	}
	if before.Schema != schema || before.Current != 0 || before.Latest != latest || before.Pending() != int(latest) {
		t.Errorf("fresh schema status = %+v, want nothing applied of %d", before, latest)
	}

	code, out, errs = execute(t, "migrate", "--db-schema", schema)
	if code != ExitOK {
		t.Fatalf("migrate: exit %d, stderr %s", code, errs)
	}
	if want := fmt.Sprintf("now at version %d", latest); !strings.Contains(out, "schema "+schema+": applied 1") || !strings.Contains(out, want) {
		t.Errorf("migrate output %q, want it to list version 1 and %q", out, want)
	}

	code, out, errs = execute(t, "migrate", "--db-schema", schema, "--output", "json")
	if code != ExitOK {
		t.Fatalf("second migrate: exit %d, stderr %s", code, errs)
	}
	var again migrateResult
	if err := json.Unmarshal([]byte(out), &again); err != nil {
		t.Fatalf("migrate JSON %q: %v", out, err)
	}
	if len(again.Applied) != 0 || again.Current != latest {
		t.Errorf("second migrate = %+v, want nothing applied, current %d", again, latest)
	}

	code, out, errs = execute(t, "migrate", "status", "--db-schema", schema)
	if code != ExitOK {
		t.Fatalf("migrate status: exit %d, stderr %s", code, errs)
	}
	if want := fmt.Sprintf("schema %s: version %d of %d", schema, latest, latest); !strings.Contains(out, want) ||
		strings.Contains(out, "pending") {
		t.Errorf("status after migrate = %q, want %q and nothing pending", out, want)
	}
}

func TestMigrate_PostgresUnreachable_ExitsOneNamingRedactedURL(t *testing.T) {
	databaseURL := catalogtest.UnreachableURL(t)
	var out, errb bytes.Buffer
	code := Execute(context.Background(), []string{"migrate", "status"},
		envMap(map[string]string{"DATABASE_URL": databaseURL}), &out, &errb)
	if code != ExitFailure {
		t.Errorf("exit code = %d, want %d", code, ExitFailure)
	}
	wantRedactedURL(t, errb.String(), databaseURL)
}

// wantRedactedURL checks that out names databaseURL as user@host:port/database
// and never repeats its password.
func wantRedactedURL(t *testing.T, out, databaseURL string) {
	t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	if want := "postgres://" + u.User.Username() + "@" + u.Host + u.Path; !strings.Contains(out, want) {
		t.Errorf("output does not name %s:\n%s", want, out)
	}
	if pw, ok := u.User.Password(); ok && strings.Contains(out, pw) {
		t.Errorf("output repeats the database password:\n%s", out)
	}
}
