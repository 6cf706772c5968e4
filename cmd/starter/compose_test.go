package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/api/operatorservice/v1"
	sdkclient "go.temporal.io/sdk/client"
	"go.yaml.in/yaml/v3"

	"github.com/graftworks/graft/cmd/internal/workercmd"
	"github.com/graftworks/graft/internal/devstack"
	"github.com/graftworks/graft/internal/searchattr"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/internal/tools"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/s3"
)

// No Docker engine runs where these tests run: they check docker-compose.yml
// and the Dockerfile by structure, and run the pieces of the stack that do
// not need Docker (the search-attribute setup script against a Temporal dev
// server, the S3 server's bucket bootstrap with versitygw) as local processes.

type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
	Configs  map[string]struct {
		Content string `yaml:"content"`
	} `yaml:"configs"`
}

type composeService struct {
	Image         string    `yaml:"image"`
	ContainerName string    `yaml:"container_name"`
	Build         yaml.Node `yaml:"build"`
	Entrypoint    []string  `yaml:"entrypoint"`
	Command       []string  `yaml:"command"`
	Environment   yaml.Node `yaml:"environment"`
	DependsOn     yaml.Node `yaml:"depends_on"`
	Ports         []string  `yaml:"ports"`
	Expose        []string  `yaml:"expose"`
	Healthcheck   *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	StopGracePeriod string `yaml:"stop_grace_period"`
	Configs         []struct {
		Source string `yaml:"source"`
		Target string `yaml:"target"`
	} `yaml:"configs"`
}

// repoRoot is the module root, where docker-compose.yml lives.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := tools.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("parse docker-compose.yml: %v", err)
	}
	return f
}

func (f composeFile) service(t *testing.T, name string) composeService {
	t.Helper()
	s, ok := f.Services[name]
	if !ok {
		t.Fatalf("docker-compose.yml has no service %q", name)
	}
	return s
}

var composeVar = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(:?-([^}]*))?\}`)

// interpolate expands compose variables as `docker compose` does with an
// empty environment: ${VAR:-default} and ${VAR-default} become the default,
// ${VAR} the empty string, and $$ a literal $.
func interpolate(s string) string {
	return composeVar.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		return composeVar.FindStringSubmatch(m)[3]
	})
}

// env returns the service's environment, interpolated; both the map and the
// list form are accepted.
func (s composeService) env(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	switch s.Environment.Kind {
	case 0:
	case yaml.MappingNode:
		var m map[string]string
		if err := s.Environment.Decode(&m); err != nil {
			t.Fatalf("environment: %v", err)
		}
		for k, v := range m {
			out[k] = interpolate(v)
		}
	case yaml.SequenceNode:
		var l []string
		if err := s.Environment.Decode(&l); err != nil {
			t.Fatalf("environment: %v", err)
		}
		for _, kv := range l {
			k, v, _ := strings.Cut(kv, "=")
			out[k] = interpolate(v)
		}
	default:
		t.Fatalf("environment: unexpected YAML kind %v", s.Environment.Kind)
	}
	return out
}

// dependsOn returns each dependency with its condition (service_started for
// the list form).
func (s composeService) dependsOn(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	switch s.DependsOn.Kind {
	case 0:
	case yaml.SequenceNode:
		var l []string
		if err := s.DependsOn.Decode(&l); err != nil {
			t.Fatal(err)
		}
		for _, d := range l {
			out[d] = "service_started"
		}
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := s.DependsOn.Decode(&m); err != nil {
			t.Fatal(err)
		}
		for d, c := range m {
			out[d] = c.Condition
		}
	}
	return out
}

func (s composeService) build(t *testing.T) (context, dockerfile string) {
	t.Helper()
	var b struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	}
	if s.Build.Kind == yaml.ScalarNode {
		return s.Build.Value, "Dockerfile"
	}
	if err := s.Build.Decode(&b); err != nil {
		t.Fatalf("build: %v", err)
	}
	return b.Context, b.Dockerfile
}

func TestCompose_HasEveryServiceOfTheStack_WithPinnedImages(t *testing.T) {
	f := loadCompose(t)
	for _, name := range []string{"postgres", "temporal", "temporal-setup", "temporal-ui", "s3", "migrate", "worker"} {
		s := f.service(t, name)
		if s.Image == "" {
			t.Errorf("service %s: no image", name)
		}
		if s.Build.Kind != 0 {
			continue // built here; the tag is local
		}
		repo, tag, ok := strings.Cut(s.Image, ":")
		if !ok || tag == "" || tag == "latest" {
			t.Errorf("service %s: image %q is not pinned to a version", name, s.Image)
		}
		if strings.Contains(strings.ToLower(repo), "minio") {
			t.Errorf("service %s: image %q: the S3 server must not be MinIO (AGPL)", name, s.Image)
		}
	}
	if got := f.service(t, "s3").Image; got != "versity/versitygw:"+tools.VersityGW.Version {
		t.Errorf("s3 image = %q, want versity/versitygw:%s (the version the tests run)", got, tools.VersityGW.Version)
	}
	temporal := f.service(t, "temporal")
	if !strings.HasPrefix(temporal.Image, "temporalio/auto-setup:") {
		t.Errorf("temporal image = %q, want temporalio/auto-setup (the server on Postgres)", temporal.Image)
	}
	env := temporal.env(t)
	if env["DB"] != "postgres12" || env["POSTGRES_SEEDS"] != "postgres" {
		t.Errorf("temporal: DB=%q POSTGRES_SEEDS=%q, want postgres12 on the postgres service", env["DB"], env["POSTGRES_SEEDS"])
	}
	if d := temporal.dependsOn(t); d["postgres"] != "service_healthy" {
		t.Errorf("temporal depends_on postgres = %q, want service_healthy", d["postgres"])
	}
	// The dynamic config the server is pointed at is the one mounted.
	want := "/etc/temporal/" + env["DYNAMIC_CONFIG_FILE_PATH"]
	if len(temporal.Configs) != 1 || temporal.Configs[0].Target != want {
		t.Errorf("temporal configs = %+v, want one mounted at %s", temporal.Configs, want)
	} else if c, ok := f.Configs[temporal.Configs[0].Source]; !ok || !strings.Contains(c.Content, "system.enableActivityEagerExecution") {
		t.Errorf("config %q missing or without graft's dynamic config", temporal.Configs[0].Source)
	}
	if ui := f.service(t, "temporal-ui").env(t); ui["TEMPORAL_ADDRESS"] != "temporal:7233" {
		t.Errorf("temporal-ui TEMPORAL_ADDRESS = %q, want temporal:7233", ui["TEMPORAL_ADDRESS"])
	}
}

func TestCompose_WorkerBuildsFromTheRepositoryDockerfile(t *testing.T) {
	f := loadCompose(t)
	root := repoRoot(t)
	for _, name := range []string{"worker", "migrate"} {
		ctx, dockerfile := f.service(t, name).build(t)
		if ctx != "." || dockerfile != "Dockerfile" {
			t.Errorf("%s build = (%q, %q), want the repository's Dockerfile at context .", name, ctx, dockerfile)
		}
	}
	if f.service(t, "worker").Image != f.service(t, "migrate").Image {
		t.Errorf("worker and migrate tag different images; migrate must run the worker's binary")
	}
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(string(gomod))[1]
	for _, want := range []string{
		"ARG GO_VERSION=" + goVersion,
		"FROM golang:${GO_VERSION} AS build",
		"go build -trimpath -ldflags=\"-s -w\" -o /out/graft-worker ./cmd/worker",
		`ENTRYPOINT ["/usr/local/bin/graft-worker"]`,
		"USER nonroot",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	ignore, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".git", ".bin", ".graft-data"} {
		if !slices.Contains(strings.Split(string(ignore), "\n"), want) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
}

func TestCompose_WorkerScales_NoContainerNameNoHostPort(t *testing.T) {
	f := loadCompose(t)
	for name, s := range f.Services {
		if s.ContainerName != "" {
			t.Errorf("service %s has container_name %q; a fixed name breaks --scale", name, s.ContainerName)
		}
	}
	w := f.service(t, "worker")
	if len(w.Ports) != 0 {
		t.Errorf("worker publishes host ports %v; two copies would collide", w.Ports)
	}
	shutdown, err := time.ParseDuration(w.env(t)["GRAFT_SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Fatalf("worker GRAFT_SHUTDOWN_TIMEOUT: %v", err)
	}
	grace, err := time.ParseDuration(w.StopGracePeriod)
	if err != nil {
		t.Fatalf("worker stop_grace_period: %v", err)
	}
	if grace <= shutdown {
		t.Errorf("stop_grace_period %s <= GRAFT_SHUTDOWN_TIMEOUT %s: Docker would kill running activities", grace, shutdown)
	}
}

func TestCompose_WorkerWaitsForItsDependencies(t *testing.T) {
	f := loadCompose(t)
	want := map[string]string{
		"postgres":       "service_healthy",
		"s3":             "service_healthy",
		"temporal-setup": "service_completed_successfully",
		"migrate":        "service_completed_successfully",
	}
	got := f.service(t, "worker").dependsOn(t)
	for dep, cond := range want {
		if got[dep] != cond {
			t.Errorf("worker depends_on %s = %q, want %q", dep, got[dep], cond)
		}
		if cond == "service_healthy" && f.service(t, dep).Healthcheck == nil {
			t.Errorf("worker waits for %s to be healthy, but %s has no healthcheck", dep, dep)
		}
	}
	if d := f.service(t, "migrate").dependsOn(t); d["postgres"] != "service_healthy" {
		t.Errorf("migrate depends_on postgres = %q, want service_healthy", d["postgres"])
	}
	if d := f.service(t, "temporal-setup").dependsOn(t); d["temporal"] == "" {
		t.Errorf("temporal-setup does not depend on temporal")
	}
}

// TestCompose_WorkerEnvironment_IsAValidWorkerConfigWiredToTheStack loads the
// worker's compose environment through graft-worker's own configuration code.
func TestCompose_WorkerEnvironment_IsAValidWorkerConfigWiredToTheStack(t *testing.T) {
	f := loadCompose(t)
	wenv := f.service(t, "worker").env(t)
	cfg, err := workercmd.LoadConfig(nil, func(k string) (string, bool) { v, ok := wenv[k]; return v, ok })
	if err != nil {
		t.Fatalf("graft-worker rejects the compose environment: %v", err)
	}
	if cfg.TemporalAddress != "temporal:7233" {
		t.Errorf("temporal address = %q, want temporal:7233", cfg.TemporalAddress)
	}
	if cfg.Migrate {
		t.Errorf("workers migrate at start; the migrate service does it once")
	}

	// S3: the endpoint is the s3 service on versitygw's port, the bucket is the
	// one its command creates, and the credentials are its root keys.
	s3svc := f.service(t, "s3")
	s3cmd := interpolate(strings.Join(s3svc.Command, " "))
	u, err := url.Parse(cfg.S3.Endpoint)
	if err != nil || u.Hostname() != "s3" {
		t.Fatalf("S3 endpoint = %q, want the s3 service", cfg.S3.Endpoint)
	}
	if !strings.Contains(s3cmd, "--port :"+u.Port()) {
		t.Errorf("s3 command %q does not listen on the worker's endpoint port %s", s3cmd, u.Port())
	}
	if !strings.Contains(s3cmd, "mkdir -p /data/"+cfg.S3.Bucket+" ") || !strings.HasSuffix(s3cmd, "posix /data") {
		t.Errorf("s3 command %q does not create bucket %q in its posix root", s3cmd, cfg.S3.Bucket)
	}
	if !cfg.S3.PathStyle {
		t.Errorf("S3 path style is off; versitygw needs it")
	}
	senv := s3svc.env(t)
	if wenv["AWS_ACCESS_KEY_ID"] != senv["ROOT_ACCESS_KEY"] || wenv["AWS_SECRET_ACCESS_KEY"] != senv["ROOT_SECRET_KEY"] ||
		wenv["AWS_ACCESS_KEY_ID"] == "" {
		t.Errorf("worker AWS credentials do not match the s3 service's root keys")
	}

	// Postgres: the ledger is the database the postgres service creates, as its user.
	penv := f.service(t, "postgres").env(t)
	pg, err := pgconn.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	if pg.Host != "postgres" || pg.Port != 5432 || pg.User != penv["POSTGRES_USER"] ||
		pg.Password != penv["POSTGRES_PASSWORD"] || pg.Database != penv["POSTGRES_DB"] {
		t.Errorf("DATABASE_URL %s does not name the postgres service's database %s as %s",
			cfg.DatabaseURL, penv["POSTGRES_DB"], penv["POSTGRES_USER"])
	}
	if menv := f.service(t, "migrate").env(t); menv["DATABASE_URL"] != cfg.DatabaseURL {
		t.Errorf("migrate DATABASE_URL %q differs from the worker's %q", menv["DATABASE_URL"], cfg.DatabaseURL)
	}
	if tenv := f.service(t, "temporal").env(t); tenv["POSTGRES_USER"] != penv["POSTGRES_USER"] || tenv["POSTGRES_PWD"] != penv["POSTGRES_PASSWORD"] {
		t.Errorf("temporal's Postgres credentials differ from the postgres service's")
	}

	// Metrics: reachable from the compose network, on the exposed port.
	host, port, err := net.SplitHostPort(cfg.MetricsAddr)
	if err != nil || host != "0.0.0.0" {
		t.Errorf("metrics address %q does not listen on every interface", cfg.MetricsAddr)
	}
	if !slices.Contains(f.service(t, "worker").Expose, port) {
		t.Errorf("worker does not expose its metrics port %s", port)
	}
}

// TestCompose_TemporalSetup_RegistersEverySearchAttribute_Idempotently runs the
// temporal-setup service's script, with the pinned Temporal CLI, against a dev
// server namespace that has none of graft's attributes — twice.
func TestCompose_TemporalSetup_RegistersEverySearchAttribute_Idempotently(t *testing.T) {
	f := loadCompose(t)
	setup := f.service(t, "temporal-setup")
	if len(setup.Entrypoint) != 2 || len(setup.Command) != 1 {
		t.Fatalf("temporal-setup: want entrypoint [sh -c] and one script, got %q %q", setup.Entrypoint, setup.Command)
	}
	script := interpolate(setup.Command[0])
	for _, sa := range searchattr.All {
		if !strings.Contains(script, sa.Name) {
			t.Errorf("temporal-setup script does not register %s", sa.Name)
		}
	}

	ts := testenv.Temporal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, err := tools.Temporal.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("compose-setup-%d", time.Now().UnixNano())
	if out, err := exec.CommandContext(ctx, bin, "operator", "namespace", "create", "--address", ts.HostPort, "--namespace", ns).CombinedOutput(); err != nil {
		t.Fatalf("create namespace: %v\n%s", err, out)
	}
	tc, err := sdkclient.DialContext(ctx, sdkclient.Options{HostPort: ts.HostPort, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	custom := func() map[string]string {
		resp, err := tc.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for k, v := range resp.GetCustomAttributes() {
			out[k] = v.String()
		}
		return out
	}
	before := custom()
	for _, sa := range searchattr.All {
		if _, ok := before[sa.Name]; ok {
			t.Fatalf("namespace %s already has %s; the test proves nothing", ns, sa.Name)
		}
	}
	env := append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	for k, v := range setup.env(t) {
		env = append(env, k+"="+v)
	}
	env = append(env, "TEMPORAL_ADDRESS="+ts.HostPort, "TEMPORAL_NAMESPACE="+ns)
	for run := 1; run <= 2; run++ {
		cmd := exec.CommandContext(ctx, setup.Entrypoint[0], setup.Entrypoint[1], script)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("run %d of the setup script: %v\n%s", run, err, out)
		}
		if !strings.Contains(string(out), "graft search attributes registered") {
			t.Fatalf("run %d: script did not finish:\n%s", run, out)
		}
	}
	after := custom()
	for _, sa := range searchattr.All {
		if got := after[sa.Name]; !strings.EqualFold(strings.TrimPrefix(got, "INDEXED_VALUE_TYPE_"), sa.Type) {
			t.Errorf("after setup, %s has type %q, want %s", sa.Name, got, sa.Type)
		}
	}
}

// TestCompose_S3Service_BucketDirectoryAcceptsTheWorkersConditionalWrites runs
// the s3 service's command with the pinned versitygw binary (paths and port
// moved into a temp dir), waits on its healthcheck URL, and writes through
// graft's S3 store configured as the worker's compose environment says.
func TestCompose_S3Service_BucketDirectoryAcceptsTheWorkersConditionalWrites(t *testing.T) {
	f := loadCompose(t)
	s3svc := f.service(t, "s3")
	wenv := f.service(t, "worker").env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := tools.VersityGW.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	port, err := devstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := interpolate(strings.Join(s3svc.Command, " "))
	script = strings.ReplaceAll(script, "/data", dir)
	script = strings.Replace(script, "--port :7070", fmt.Sprintf("--port 127.0.0.1:%d", port), 1)
	script = strings.Replace(script, "exec versitygw", "exec "+bin, 1)
	cmd := exec.Command(s3svc.Entrypoint[0], s3svc.Entrypoint[1], script)
	cmd.Env = os.Environ()
	for k, v := range s3svc.env(t) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	health := s3svc.Healthcheck.Test[len(s3svc.Healthcheck.Test)-1]
	health = strings.Replace(health, "127.0.0.1:7070", fmt.Sprintf("127.0.0.1:%d", port), 1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(health)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthcheck %s never answered 200: %v\n%s", health, err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	st, err := s3.New(ctx, s3.Config{
		Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), Region: wenv["GRAFT_S3_REGION"],
		Bucket: wenv["GRAFT_S3_BUCKET"], PathStyle: wenv["GRAFT_S3_PATH_STYLE"] == "true",
		AccessKeyID: wenv["AWS_ACCESS_KEY_ID"], SecretAccessKey: wenv["AWS_SECRET_ACCESS_KEY"],
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, "g/refs/branches/main.json", []byte("{}"), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("first put-if-absent: %v\n%s", err, log.String())
	}
	_, err = st.Put(ctx, "g/refs/branches/main.json", []byte("{}"), storage.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("second put-if-absent = %v, want ErrPreconditionFailed", err)
	}
}
