package prodtier

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/graftworks/graft/internal/tools"
)

// composeFile is the part of docker-compose.yml the tier runs from.
type composeFile struct {
	Services map[string]struct {
		Image       string    `yaml:"image"`
		Environment yaml.Node `yaml:"environment"`
		Configs     []struct {
			Source string `yaml:"source"`
			Target string `yaml:"target"`
		} `yaml:"configs"`
	} `yaml:"services"`
	Configs map[string]struct {
		Content string `yaml:"content"`
	} `yaml:"configs"`
}

func loadCompose(t testing.TB) composeFile {
	t.Helper()
	root, err := tools.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("parse docker-compose.yml: %v", err)
	}
	return f
}

var composeVar = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(:?-([^}]*))?\}`)

// env returns a service's environment as `docker compose` interpolates it
// with nothing set: ${VAR:-default} is the default, $$ a literal $.
func (f composeFile) env(t testing.TB, service string) map[string]string {
	t.Helper()
	s, ok := f.Services[service]
	if !ok {
		t.Fatalf("docker-compose.yml has no service %q", service)
	}
	var m map[string]string
	if err := s.Environment.Decode(&m); err != nil {
		t.Fatalf("docker-compose.yml: %s's environment must be a mapping: %v", service, err)
	}
	for k, v := range m {
		m[k] = composeVar.ReplaceAllStringFunc(v, func(s string) string {
			if s == "$$" {
				return "$"
			}
			return composeVar.FindStringSubmatch(s)[3]
		})
	}
	return m
}

// temporalConfig returns what docker-compose.yml gives its temporal service:
// the environment its config template is rendered with, and the content of
// the dynamic config file it mounts.
func (f composeFile) temporalConfig(t testing.TB) (env map[string]string, dynamicConfig []byte) {
	t.Helper()
	env = f.env(t, "temporal")
	cs := f.Services["temporal"].Configs
	if len(cs) != 1 || cs[0].Target != "/etc/temporal/"+env["DYNAMIC_CONFIG_FILE_PATH"] {
		t.Fatalf("docker-compose.yml: temporal mounts %+v; want one config at /etc/temporal/$DYNAMIC_CONFIG_FILE_PATH (%s)", cs, env["DYNAMIC_CONFIG_FILE_PATH"])
	}
	c, ok := f.Configs[cs[0].Source]
	if !ok || c.Content == "" {
		t.Fatalf("docker-compose.yml: no content for config %q", cs[0].Source)
	}
	return env, []byte(c.Content)
}

// addressPaths are the parts of the server's rendered configuration that
// name where things are (hosts, ports, database names, credentials, log
// level) — what the tier sets itself (TemplateOverrides).
var addressPaths = [][]string{
	{"log", "level"},
	{"persistence", "datastores", "default", "sql", "databaseName"},
	{"persistence", "datastores", "default", "sql", "connectAddr"},
	{"persistence", "datastores", "default", "sql", "user"},
	{"persistence", "datastores", "default", "sql", "password"},
	{"persistence", "datastores", "visibility", "sql", "databaseName"},
	{"persistence", "datastores", "visibility", "sql", "connectAddr"},
	{"persistence", "datastores", "visibility", "sql", "user"},
	{"persistence", "datastores", "visibility", "sql", "password"},
	{"global", "membership", "broadcastAddress"},
	{"clusterMetadata", "clusterInformation", "active", "rpcAddress"},
	{"clusterMetadata", "clusterInformation", "active", "httpAddress"},
}

func init() {
	for _, svc := range []string{"frontend", "matching", "history", "worker"} {
		for _, k := range []string{"grpcPort", "membershipPort", "httpPort", "bindOnIP"} {
			addressPaths = append(addressPaths, []string{"services", svc, "rpc", k})
		}
	}
}

// withoutAddresses parses a rendered configuration and blanks addressPaths.
func withoutAddresses(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatalf("rendered config: %v\n%s", err, raw)
	}
	for _, p := range addressPaths {
		node := m
		for i, k := range p {
			if i == len(p)-1 {
				if _, ok := node[k]; ok {
					node[k] = "<address>"
				}
				break
			}
			next, ok := node[k].(map[string]any)
			if !ok {
				break
			}
			node = next
		}
	}
	return m
}

// TestCompose_TemporalIsTheServerTheTierRuns: docker-compose.yml's Temporal
// is the pinned server's version, and its configuration — the image's
// template rendered with the compose environment — is the tier's, apart from
// where things are; its dynamic config is the dev server's.
func TestCompose_TemporalIsTheServerTheTierRuns(t *testing.T) {
	f := loadCompose(t)
	version := strings.TrimPrefix(tools.TemporalServer.Version, "v")
	if got := f.Services["temporal"].Image; got != "temporalio/auto-setup:"+version {
		t.Errorf("temporal image %q, want temporalio/auto-setup:%s (the server the tier runs)", got, version)
	}
	if got := f.Services["temporal-setup"].Image; !strings.HasPrefix(got, "temporalio/admin-tools:"+version+"-") {
		t.Errorf("temporal-setup image %q, want temporalio/admin-tools:%s-…", got, version)
	}
	env, dc := f.temporalConfig(t)
	if env["DB"] != "postgres12" {
		t.Errorf("temporal DB=%q, want postgres12 (the tier runs Postgres persistence and SQL visibility)", env["DB"])
	}

	// What the container renders: compose's environment, plus the addresses
	// the image's entrypoint derives (BIND_ON_IP from the container's IP).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	inContainer := maps.Clone(env)
	inContainer["BIND_ON_IP"], inContainer["TEMPORAL_BROADCAST_ADDRESS"] = "172.18.0.3", "172.18.0.3"
	composeCfg, err := RenderTemporalConfig(ctx, inContainer)
	if err != nil {
		t.Fatal(err)
	}
	srv := sharedServer(t)
	tierCfg, err := os.ReadFile(srv.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	if a, b := withoutAddresses(t, composeCfg), withoutAddresses(t, tierCfg); !reflect.DeepEqual(a, b) {
		t.Fatalf("the tier's server configuration differs from docker-compose.yml's beyond addresses:\ncompose:\n%s\ntier:\n%s", composeCfg, tierCfg)
	}
	for k, v := range env {
		if got := srv.Env()[k]; got != v && !contains(TemplateOverrides, k) {
			t.Errorf("the tier renders %s=%q, compose %q", k, got, v)
		}
	}

	var composeDC, devDC map[string]any
	if err := yaml.Unmarshal(dc, &composeDC); err != nil {
		t.Fatalf("compose dynamic config: %v", err)
	}
	if err := yaml.Unmarshal(DynamicConfigYAML(), &devDC); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(composeDC, devDC) {
		t.Errorf("compose dynamic config %v, the dev server's %v: the two servers must run alike", composeDC, devDC)
	}
	running, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(srv.ConfigFile())), filepath.FromSlash(env["DYNAMIC_CONFIG_FILE_PATH"])))
	if err != nil || string(running) != string(dc) {
		t.Errorf("the tier's server runs dynamic config %q (%v), compose mounts %q", running, err, dc)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
