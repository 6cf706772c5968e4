package workercmd

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/graftworks/graft/cmd/internal/conncfg"
	"github.com/graftworks/graft/internal/catalog"
)

func TestLoadConfig_NothingGiven_IsDefaults(t *testing.T) {
	got, err := LoadConfig(nil, envMap(nil))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	want := Config{
		Settings: conncfg.Settings{
			TemporalAddress: "127.0.0.1:7233",
			Namespace:       "default",
			DialTimeout:     10 * time.Second,
			TaskQueue:       "graft",
			StoreDir:        "./.graft-data",
			DatabaseURL:     catalog.DefaultDatabaseURL,
		},
		Migrate:         true,
		MetricsAddr:     "127.0.0.1:9464",
		LogLevel:        slog.LevelInfo,
		ShutdownTimeout: 30 * time.Second,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
}

func TestLoadConfig_FlagWinsOverEnv_EnvWinsOverDefault(t *testing.T) {
	env := envMap(map[string]string{
		"GRAFT_TASK_QUEUE":       "from-env",
		"GRAFT_NAMESPACE":        "ns-from-env",
		"GRAFT_SHUTDOWN_TIMEOUT": "5s",
		"GRAFT_MIGRATE":          "false",
	})
	got, err := LoadConfig([]string{"--task-queue", "from-flag", "--migrate=true"}, env)
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if got.TaskQueue != "from-flag" {
		t.Errorf("TaskQueue = %q, want the flag's from-flag", got.TaskQueue)
	}
	if !got.Migrate {
		t.Errorf("Migrate = false, want the flag's true over GRAFT_MIGRATE=false")
	}
	if got.Namespace != "ns-from-env" {
		t.Errorf("Namespace = %q, want the environment's ns-from-env", got.Namespace)
	}
	if got.ShutdownTimeout != 5*time.Second {
		t.Errorf("ShutdownTimeout = %s, want the environment's 5s", got.ShutdownTimeout)
	}
	if got.TemporalAddress != conncfg.DefaultTemporalAddress {
		t.Errorf("TemporalAddress = %q, want the default", got.TemporalAddress)
	}
}

func TestLoadConfig_EveryEnvironmentVariable_SetsItsField(t *testing.T) {
	env := map[string]string{
		"GRAFT_TEMPORAL_ADDRESS":                "temporal.internal:7233",
		"GRAFT_NAMESPACE":                       "prod",
		"GRAFT_TLS":                             "true",
		"GRAFT_TLS_SERVER_NAME":                 "temporal.example",
		"GRAFT_DIAL_TIMEOUT":                    "3s",
		"GRAFT_TASK_QUEUE":                      "tq",
		"GRAFT_S3_ENDPOINT":                     "http://127.0.0.1:7070",
		"GRAFT_S3_BUCKET":                       "bucket",
		"GRAFT_S3_PREFIX":                       "pre/fix",
		"GRAFT_S3_REGION":                       "eu-west-1",
		"GRAFT_S3_PATH_STYLE":                   "true",
		"GRAFT_DB_SCHEMA":                       "ledger",
		"GRAFT_MAX_CONCURRENT_ACTIVITIES":       "7",
		"GRAFT_MAX_CONCURRENT_LOCAL_ACTIVITIES": "8",
		"GRAFT_MAX_CONCURRENT_WORKFLOW_TASKS":   "9",
		"GRAFT_MIGRATE":                         "false",
		"GRAFT_METRICS_ADDR":                    "0.0.0.0:9999",
		"GRAFT_LOG_LEVEL":                       "debug",
		"GRAFT_SHUTDOWN_TIMEOUT":                "45s",
		"DATABASE_URL":                          "postgres://graft@db.internal:5432/graft",
	}
	got, err := LoadConfig(nil, envMap(env))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	want := Config{
		Settings: conncfg.Settings{
			TemporalAddress: "temporal.internal:7233",
			Namespace:       "prod",
			TLS:             conncfg.TLSFiles{Enabled: true, ServerName: "temporal.example"},
			DialTimeout:     3 * time.Second,
			TaskQueue:       "tq",
			StoreDir:        conncfg.DefaultStoreDir,
			S3:              conncfg.S3Config{Endpoint: "http://127.0.0.1:7070", Bucket: "bucket", Prefix: "pre/fix", Region: "eu-west-1", PathStyle: true},
			DatabaseURL:     "postgres://graft@db.internal:5432/graft",
			DBSchema:        "ledger",
		},
		MaxConcurrentActivities:      7,
		MaxConcurrentLocalActivities: 8,
		MaxConcurrentWorkflowTasks:   9,
		Migrate:                      false,
		MetricsAddr:                  "0.0.0.0:9999",
		LogLevel:                     slog.LevelDebug,
		ShutdownTimeout:              45 * time.Second,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("from environment:\n got %+v\nwant %+v", got, want)
	}
	// Every variable the help advertises is exercised here (the TLS files have their own test).
	for flag, name := range envNames {
		if _, ok := env[name]; !ok && !strings.HasPrefix(flag, "tls-") && flag != conncfg.FlagStoreDir {
			t.Errorf("environment variable %s (--%s) is not covered by this test", name, flag)
		}
	}
}

func TestLoadConfig_EmptyVariable_IsUnsetExceptMetricsAddrWhichDisables(t *testing.T) {
	got, err := LoadConfig(nil, envMap(map[string]string{
		"GRAFT_TASK_QUEUE":   "",
		"GRAFT_NAMESPACE":    "",
		"DATABASE_URL":       "",
		"GRAFT_METRICS_ADDR": "",
	}))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if got.TaskQueue != "graft" || got.Namespace != "default" || got.DatabaseURL != catalog.DefaultDatabaseURL {
		t.Errorf("empty variables changed defaults: task queue %q, namespace %q, database %q",
			got.TaskQueue, got.Namespace, got.DatabaseURL)
	}
	if got.MetricsAddr != "" {
		t.Errorf("MetricsAddr = %q, want empty (disabled) from GRAFT_METRICS_ADDR=\"\"", got.MetricsAddr)
	}
	got, err = LoadConfig([]string{"--metrics-addr="}, envMap(nil))
	if err != nil || got.MetricsAddr != "" {
		t.Errorf("--metrics-addr= gave %q, %v; want disabled", got.MetricsAddr, err)
	}
}

func TestLoadConfig_BadValue_ErrorNamesTheFlagOrVariableItCameFrom(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.pem")
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"negative activities by flag", []string{"--max-concurrent-activities=-1"}, nil, []string{"--max-concurrent-activities:"}},
		{"negative activities by env", nil, map[string]string{"GRAFT_MAX_CONCURRENT_ACTIVITIES": "-1"}, []string{"GRAFT_MAX_CONCURRENT_ACTIVITIES:"}},
		{"negative local activities", []string{"--max-concurrent-local-activities=-3"}, nil, []string{"--max-concurrent-local-activities:"}},
		{"one workflow task", nil, map[string]string{"GRAFT_MAX_CONCURRENT_WORKFLOW_TASKS": "1"}, []string{"GRAFT_MAX_CONCURRENT_WORKFLOW_TASKS:", "at least 2"}},
		{"unparseable duration in env", nil, map[string]string{"GRAFT_DIAL_TIMEOUT": "soon"}, []string{`GRAFT_DIAL_TIMEOUT="soon"`}},
		{"zero dial timeout", []string{"--dial-timeout=0s"}, nil, []string{"--dial-timeout:"}},
		{"negative shutdown timeout", nil, map[string]string{"GRAFT_SHUTDOWN_TIMEOUT": "-1s"}, []string{"GRAFT_SHUTDOWN_TIMEOUT:"}},
		{"address without port", []string{"--temporal-address", "temporal"}, nil, []string{"--temporal-address:"}},
		{"metrics address without port", nil, map[string]string{"GRAFT_METRICS_ADDR": "localhost"}, []string{"GRAFT_METRICS_ADDR:"}},
		{"empty task queue", []string{"--task-queue="}, nil, []string{"--task-queue:", "empty"}},
		{"empty namespace", []string{"--namespace="}, nil, []string{"--namespace:", "empty"}},
		{"bad schema", nil, map[string]string{"GRAFT_DB_SCHEMA": "Bad-Schema"}, []string{"GRAFT_DB_SCHEMA:"}},
		{"bad log level", []string{"--log-level", "loud"}, nil, []string{"--log-level", "loud"}},
		{"bad log level by env", nil, map[string]string{"GRAFT_LOG_LEVEL": "loud"}, []string{`GRAFT_LOG_LEVEL="loud"`}},
		{"bad bool by env", nil, map[string]string{"GRAFT_MIGRATE": "perhaps"}, []string{`GRAFT_MIGRATE="perhaps"`}},
		{"unparseable database URL", nil, map[string]string{"DATABASE_URL": "postgres://u:hunter2@db:notaport/x"}, []string{"DATABASE_URL:"}},
		{"cert without key", []string{"--tls-cert", missing}, nil, []string{"--tls-cert", "--tls-key", "together"}},
		{"missing CA file", nil, map[string]string{"GRAFT_TLS_CA": missing}, []string{"GRAFT_TLS_CA:", "missing.pem"}},
		{"bad S3 prefix", []string{"--s3-bucket", "b", "--s3-prefix", "/lead"}, nil, []string{"--s3-prefix:"}},
		{"bad S3 endpoint", []string{"--s3-bucket", "b"}, map[string]string{"GRAFT_S3_ENDPOINT": "ftp://x"}, []string{"GRAFT_S3_ENDPOINT:"}},
		{"stray argument", []string{"extra"}, nil, []string{"extra"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfig(tc.args, envMap(tc.env))
			if err == nil {
				t.Fatalf("LoadConfig(%q, %v) succeeded, want an error", tc.args, tc.env)
			}
			var ue usageError
			if !errors.As(err, &ue) {
				t.Errorf("error %v is not a usage error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q repeats the database password", err)
			}
		})
	}
}

func TestLoadConfig_StoreDirAndS3_AreExclusive(t *testing.T) {
	_, err := LoadConfig([]string{"--store-dir", "/data", "--s3-bucket", "b"}, envMap(nil))
	if err == nil || !strings.Contains(err.Error(), "--store-dir") || !strings.Contains(err.Error(), "--s3-bucket") ||
		!strings.Contains(err.Error(), "exclusive") {
		t.Errorf("flags: err = %v, want one naming --store-dir and --s3-bucket as exclusive", err)
	}
	_, err = LoadConfig(nil, envMap(map[string]string{"GRAFT_STORE_DIR": "/data", "GRAFT_S3_ENDPOINT": "http://s3:9000"}))
	if err == nil || !strings.Contains(err.Error(), "GRAFT_STORE_DIR") || !strings.Contains(err.Error(), "GRAFT_S3_ENDPOINT") {
		t.Errorf("environment: err = %v, want one naming GRAFT_STORE_DIR and GRAFT_S3_ENDPOINT", err)
	}
	_, err = LoadConfig([]string{"--s3-path-style"}, envMap(nil))
	if err == nil || !strings.Contains(err.Error(), "--s3-path-style needs --s3-bucket") {
		t.Errorf("S3 option without bucket: err = %v, want one saying --s3-path-style needs --s3-bucket", err)
	}
}

func TestLoadConfig_S3BucketAlone_SelectsS3WithDefaults(t *testing.T) {
	got, err := LoadConfig([]string{"--s3-bucket", "graft", "--s3-endpoint", "https://s3.example", "--s3-path-style"}, envMap(nil))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	want := conncfg.S3Config{Endpoint: "https://s3.example", Bucket: "graft", PathStyle: true}
	if got.S3 != want {
		t.Errorf("S3 = %+v, want %+v", got.S3, want)
	}
	if d := got.DescribeStore(); d != "s3://graft at https://s3.example" {
		t.Errorf("DescribeStore = %q", d)
	}
}

func TestLoadConfig_TLSFiles_LoadIntoClientConfig(t *testing.T) {
	certFile, keyFile := writeSelfSigned(t)
	cfg, err := LoadConfig(nil, envMap(map[string]string{
		"GRAFT_TLS_CERT": certFile, "GRAFT_TLS_KEY": keyFile, "GRAFT_TLS_CA": certFile,
	}))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	tc, err := cfg.TLS.Config()
	if err != nil {
		t.Fatalf("TLS.Config: %v", err)
	}
	if tc == nil || len(tc.Certificates) != 1 || tc.RootCAs == nil {
		t.Fatalf("tls config = %+v, want one client certificate and custom roots", tc)
	}
	plain, err := DefaultConfig().TLS.Config()
	if err != nil || plain != nil {
		t.Errorf("default TLS = %v, %v; want nil (plain TCP)", plain, err)
	}
}

func TestExecute_ConfigError_ExitsTwoNamingTheFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Execute(context.Background(), []string{"run", "--max-concurrent-workflow-tasks", "1"},
		envMap(nil), &stdout, &stderr)
	if code != ExitUsage {
		t.Errorf("exit code = %d, want %d", code, ExitUsage)
	}
	if !strings.Contains(stderr.String(), "--max-concurrent-workflow-tasks") {
		t.Errorf("stderr %q does not name the flag", stderr.String())
	}
	for _, args := range [][]string{{"frobnicate"}, {"--no-such-flag"}, {"migrate", "status", "extra"}, {"migrate", "--task-queue", "x"}} {
		stderr.Reset()
		if code := Execute(context.Background(), args, envMap(nil), &stdout, &stderr); code != ExitUsage {
			t.Errorf("%q: exit code = %d, want %d (stderr %q)", args, code, ExitUsage, stderr.String())
		}
	}
}

func TestExecute_Help_ListsEveryEnvironmentVariable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Execute(context.Background(), []string{"--help"}, envMap(nil), &stdout, &stderr); code != ExitOK {
		t.Fatalf("--help exit code = %d, stderr %q", code, stderr.String())
	}
	for _, name := range envNames {
		if !strings.Contains(stdout.String(), "$"+name) {
			t.Errorf("help does not mention $%s", name)
		}
	}
	if !strings.Contains(stdout.String(), "DATABASE_URL") {
		t.Errorf("help does not mention DATABASE_URL")
	}
	// Help works even when the configuration would not.
	broken := envMap(map[string]string{"DATABASE_URL": "postgres://u:p@h:notaport/x", "GRAFT_MIGRATE": "perhaps"})
	for _, args := range [][]string{{"help", "migrate"}, {"run", "--help"}, {"migrate", "status", "-h"}} {
		stdout.Reset()
		if code := Execute(context.Background(), args, broken, &stdout, &stderr); code != ExitOK || stdout.Len() == 0 {
			t.Errorf("%q with a broken environment: exit %d, %d bytes of help", args, code, stdout.Len())
		}
	}
}

// writeSelfSigned writes a self-signed certificate and its key, PEM-encoded.
func writeSelfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "graft-test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
