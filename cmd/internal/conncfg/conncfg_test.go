package conncfg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/storage"
)

func envOf(m map[string]string) LookupEnv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// parse registers every shared flag on a fresh flag set, parses args and
// binds the environment.
func parse(t *testing.T, args []string, env map[string]string, emptyIsValue ...string) (Settings, *Sources, error) {
	t.Helper()
	s := Defaults()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	s.AddTemporalFlags(fs)
	s.AddStoreFlags(fs)
	s.AddLedgerFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	src, err := EnvNames().Bind(fs, envOf(env), emptyIsValue...)
	s.ReadDatabaseURL(envOf(env))
	return s, src, err
}

func wantContains(t *testing.T, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", wants)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func TestBind_FlagBeatsEnvironmentBeatsDefault(t *testing.T) {
	s, src, err := parse(t, []string{"--namespace", "from-flag"}, map[string]string{
		"GRAFT_NAMESPACE": "from-env", "GRAFT_TASK_QUEUE": "q-env", "GRAFT_DIAL_TIMEOUT": "3s",
		"GRAFT_S3_PATH_STYLE": "true", "DATABASE_URL": "postgres://u@db:5432/ledger",
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Namespace != "from-flag" || s.TaskQueue != "q-env" || s.DialTimeout != 3*time.Second || !s.S3.PathStyle ||
		s.DatabaseURL != "postgres://u@db:5432/ledger" {
		t.Errorf("flag or environment not applied: %+v", s)
	}
	if s.TemporalAddress != DefaultTemporalAddress || s.StoreDir != DefaultStoreDir {
		t.Errorf("defaults not kept: %+v", s)
	}
	if src.Name(FlagNamespace) != "--namespace" || src.Name(FlagTaskQueue) != "GRAFT_TASK_QUEUE" {
		t.Errorf("sources: namespace %q, task queue %q", src.Name(FlagNamespace), src.Name(FlagTaskQueue))
	}
	if got := src.Name(FlagStoreDir); got != "--store-dir (or GRAFT_STORE_DIR)" {
		t.Errorf("an unset flag is named %q, want both its flag and variable", got)
	}
}

func TestBind_EmptyVariable_IsUnsetUnlessItsFlagTakesEmpty(t *testing.T) {
	env := map[string]string{"GRAFT_NAMESPACE": "", "GRAFT_STORE_DIR": "", "DATABASE_URL": ""}
	s, src, err := parse(t, nil, env)
	if err != nil {
		t.Fatal(err)
	}
	if s.Namespace != DefaultNamespace || s.StoreDir != DefaultStoreDir || s.DatabaseURL != catalog.DefaultDatabaseURL {
		t.Errorf("empty variables changed defaults: %+v", s)
	}
	if src.Given(FlagNamespace) {
		t.Errorf("an empty GRAFT_NAMESPACE counts as given")
	}
	s, src, err = parse(t, nil, env, FlagStoreDir)
	if err != nil {
		t.Fatal(err)
	}
	if s.StoreDir != "" || !src.Given(FlagStoreDir) {
		t.Errorf("store dir %q, given %v; want the empty value GRAFT_STORE_DIR gave", s.StoreDir, src.Given(FlagStoreDir))
	}
	wantContains(t, s.ValidateStore(src), "GRAFT_STORE_DIR: must not be empty")
}

func TestBind_UnparseableVariable_ErrorNamesVariableAndValue(t *testing.T) {
	_, _, err := parse(t, nil, map[string]string{"GRAFT_DIAL_TIMEOUT": "soon", "GRAFT_TLS": "perhaps"})
	wantContains(t, err, `GRAFT_DIAL_TIMEOUT="soon"`, `GRAFT_TLS="perhaps"`)
}

func TestEnvNames_MoreFlags_SharedTableUnchanged(t *testing.T) {
	e := EnvNames("output")
	if e["output"] != "GRAFT_OUTPUT" || e[FlagS3Bucket] != "GRAFT_S3_BUCKET" {
		t.Errorf("extended table %v", e)
	}
	if _, ok := EnvNames()["output"]; ok {
		t.Errorf("EnvNames(\"output\") changed the shared table")
	}
	if got := e.Usage("output", "format"); got != "format [$GRAFT_OUTPUT]" {
		t.Errorf("Usage = %q", got)
	}
}

func TestAddFlags_EveryFlagHasItsVariable_AndEveryVariableItsFlag(t *testing.T) {
	var s Settings
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	s.AddTemporalFlags(fs)
	s.AddStoreFlags(fs)
	s.AddLedgerFlags(fs)
	n := 0
	fs.VisitAll(func(f *pflag.Flag) {
		n++
		env, ok := EnvNames()[f.Name]
		if !ok || !strings.HasSuffix(f.Usage, "[$"+env+"]") {
			t.Errorf("--%s: usage %q does not end with its variable", f.Name, f.Usage)
		}
	})
	if n != len(EnvNames()) {
		t.Errorf("%d flags, %d variables", n, len(EnvNames()))
	}
}

func TestValidateTemporal_BadValues_AreNamedAsTheOperatorGaveThem(t *testing.T) {
	s, src, err := parse(t, []string{"--task-queue", " ", "--dial-timeout", "0s", "--tls-cert", "c.pem"},
		map[string]string{"GRAFT_TEMPORAL_ADDRESS": "nocolon", "GRAFT_NAMESPACE": " "})
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, s.ValidateTemporal(src),
		`GRAFT_TEMPORAL_ADDRESS: want host:port, got "nocolon"`,
		"GRAFT_NAMESPACE: must not be empty",
		"--task-queue: must not be empty",
		"--dial-timeout: must be positive",
		"--tls-cert and --tls-key (or GRAFT_TLS_KEY) must be given together")
	if err := Defaults().ValidateTemporal(nil); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
}

func TestValidateStore_DirOrS3_AndS3Values(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"dir and bucket", []string{"--store-dir", "/d", "--s3-bucket", "b"}, nil,
			[]string{"--store-dir and --s3-bucket are mutually exclusive"}},
		{"dir and endpoint by env", nil, map[string]string{"GRAFT_STORE_DIR": "/d", "GRAFT_S3_ENDPOINT": "http://s3:9000"},
			[]string{"GRAFT_STORE_DIR and GRAFT_S3_ENDPOINT are mutually exclusive", "GRAFT_S3_ENDPOINT needs --s3-bucket"}},
		{"option without bucket", []string{"--s3-path-style"}, nil, []string{"--s3-path-style needs --s3-bucket"}},
		{"bad prefix", []string{"--s3-bucket", "b", "--s3-prefix", "/lead"}, nil, []string{"--s3-prefix:"}},
		{"bad endpoint", []string{"--s3-bucket", "b"}, map[string]string{"GRAFT_S3_ENDPOINT": "ftp://x"},
			[]string{`GRAFT_S3_ENDPOINT: want an http:// or https:// URL, got "ftp://x"`}},
		{"empty dir", []string{"--store-dir", " "}, nil, []string{"--store-dir: must not be empty"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, src, err := parse(t, tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			wantContains(t, s.ValidateStore(src), tc.want...)
		})
	}
	s, src, err := parse(t, []string{"--s3-bucket", "b", "--s3-prefix", "graft/x", "--s3-endpoint", "https://s3.example"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ValidateStore(src); err != nil {
		t.Errorf("good S3 settings rejected: %v", err)
	}
}

func TestValidateLedger_BadURLAndSchema_NamedWithoutThePassword(t *testing.T) {
	s, src, err := parse(t, nil, map[string]string{
		"DATABASE_URL": "postgres://u:hunter2@db:notaport/x", "GRAFT_DB_SCHEMA": "Bad-Schema",
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.ValidateLedger(src)
	wantContains(t, err, "DATABASE_URL: ", "GRAFT_DB_SCHEMA: ")
	if err != nil && strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %q repeats the database password", err)
	}
}

func TestValidateTLSFiles_MissingOrEmptyFile_NamesItsFlag(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	s, src, err := parse(t, []string{"--tls-ca", notPEM},
		map[string]string{"GRAFT_TLS_CERT": missing, "GRAFT_TLS_KEY": missing})
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, s.ValidateTLSFiles(src), "GRAFT_TLS_CERT, GRAFT_TLS_KEY: ", "missing.pem",
		"--tls-ca: no PEM certificate in "+notPEM)
	_, err = s.TLS.Config()
	wantContains(t, err, "--tls-cert, --tls-key: ", "--tls-ca: ")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %v does not wrap the missing file's", err)
	}
}

func TestTLSConfig_PlainUnlessAskedFor_CertNeedsKey(t *testing.T) {
	plain, err := TLSFiles{}.Config()
	if err != nil || plain != nil {
		t.Errorf("no TLS setting: %v, %v; want nil (plain TCP)", plain, err)
	}
	on, err := TLSFiles{Enabled: true, ServerName: "temporal.example"}.Config()
	if err != nil || on == nil || on.ServerName != "temporal.example" || on.RootCAs != nil {
		t.Errorf("--tls with a server name: %+v, %v; want the system's roots and the name", on, err)
	}
	_, err = TLSFiles{CertFile: "c.pem"}.Config()
	wantContains(t, err, "--tls-cert and --tls-key must be given together")
}

func TestClientOptions_CarryAddressNamespaceAndTLS(t *testing.T) {
	s := Defaults()
	s.TemporalAddress, s.Namespace, s.TLS.Enabled = "temporal.internal:7233", "prod", true
	opts, err := s.ClientOptions(sdkclient.Options{Identity: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	if opts.HostPort != s.TemporalAddress || opts.Namespace != "prod" || opts.ConnectionOptions.TLS == nil || opts.Identity != "kept" {
		t.Errorf("options %+v", opts)
	}
	s.TLS = TLSFiles{CAFile: filepath.Join(t.TempDir(), "missing.pem")}
	_, err = s.ClientOptions(sdkclient.Options{})
	wantContains(t, err, "--tls-ca: ")
}

func TestDialTemporal_NothingListens_FailsWithinTheTimeoutNamingTheAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := Defaults()
	s.TemporalAddress, s.DialTimeout = addr, time.Second
	opts, err := s.ClientOptions(sdkclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	tc, err := s.DialTemporal(context.Background(), opts)
	if err == nil {
		tc.Close()
		t.Fatalf("dial to %s succeeded", addr)
	}
	wantContains(t, err, "dial temporal at "+addr)
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("took %s with a 1s dial timeout", took)
	}
}

func TestOpenStore_LocalDir_OpensAndAnswers(t *testing.T) {
	s := Defaults()
	s.StoreDir = filepath.Join(t.TempDir(), "store")
	st, err := s.OpenStore(context.Background())
	if err != nil {
		t.Fatalf("OpenStore: %v", err)
	}
	ctx := context.Background()
	if _, err := st.Put(ctx, "g/graph.json", []byte("{}"), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("put: %v", err)
	}
	if got := s.DescribeStore(); got != "dir "+s.StoreDir {
		t.Errorf("DescribeStore = %q, want dir %s", got, s.StoreDir)
	}
}

func TestOpenStore_DirUnderAFile_ErrorNamesTheStore(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := Defaults()
	s.StoreDir = filepath.Join(file, "store")
	_, err := s.OpenStore(context.Background())
	wantContains(t, err, "store dir "+s.StoreDir)
}

func TestDescribeStore_S3_NamesBucketPrefixAndEndpoint(t *testing.T) {
	for _, c := range []struct {
		s3   S3Config
		want string
	}{
		{S3Config{Bucket: "b"}, "s3://b"},
		{S3Config{Bucket: "b", Prefix: "p/q"}, "s3://b/p/q"},
		{S3Config{Bucket: "b", Prefix: "p", Endpoint: "http://127.0.0.1:7070"}, "s3://b/p at http://127.0.0.1:7070"},
	} {
		s := Settings{S3: c.s3}
		if got := s.DescribeStore(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.s3, got, c.want)
		}
	}
	rel := Settings{StoreDir: "rel"}
	abs, _ := filepath.Abs("rel")
	if got := rel.DescribeStore(); got != fmt.Sprintf("dir %s", abs) {
		t.Errorf("relative dir: %q, want the absolute %s", got, abs)
	}
}

func TestSources_Nil_NamesTheFlag(t *testing.T) {
	var s *Sources
	if s.Name(FlagTLSCA) != "--tls-ca" || s.Given(FlagTLSCA) {
		t.Errorf("nil sources: %q, %v", s.Name(FlagTLSCA), s.Given(FlagTLSCA))
	}
}

func TestBind_Booleans_TakeYesNoOnOff_BadOnesSayWhatTheyWant(t *testing.T) {
	for _, v := range []string{"yes", "On", "1", "true"} {
		s, _, err := parse(t, nil, map[string]string{"GRAFT_S3_PATH_STYLE": v, "GRAFT_S3_BUCKET": "b"})
		if err != nil || !s.S3.PathStyle {
			t.Errorf("GRAFT_S3_PATH_STYLE=%s: path style %v, %v", v, s.S3.PathStyle, err)
		}
	}
	_, _, err := parse(t, nil, map[string]string{"GRAFT_S3_PATH_STYLE": "sure", "GRAFT_DIAL_TIMEOUT": "5"})
	wantContains(t, err, `GRAFT_S3_PATH_STYLE="sure": want true or false`, `GRAFT_DIAL_TIMEOUT="5": want a duration such as "10s"`)
	if strings.Contains(err.Error(), "strconv") {
		t.Errorf("error %q shows strconv's parse error", err)
	}
}

func TestProfile_WriteThenRead_OwnerOnly_UnknownKeyNamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "graft", "config.json")
	if err := WriteProfile(path, map[string]string{"store-dir": "/srv/g", ProfileDatabaseURL: "postgres://x@y/z"}); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("profile mode %v, %v; want 0600", info.Mode(), err)
	}
	p, err := ReadProfile(path)
	if err != nil || p.Values["store-dir"] != "/srv/g" || p.DatabaseURL() != "postgres://x@y/z" {
		t.Fatalf("read back %+v, %v", p, err)
	}
	if p, err := ReadProfile(filepath.Join(t.TempDir(), "missing.json")); p != nil || err != nil {
		t.Fatalf("a missing profile is none: %+v, %v", p, err)
	}
	if err := os.WriteFile(path, []byte(`{"store_dir": "/x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = ReadProfile(path)
	wantContains(t, err, path, `"store_dir"`)
	if got := DefaultProfilePath(envOf(map[string]string{"HOME": "/h"})); got != "/h/.config/graft/config.json" {
		t.Errorf("default path %q", got)
	}
	if got := DefaultProfilePath(envOf(map[string]string{"HOME": "/h", "XDG_CONFIG_HOME": "/x"})); got != "/x/graft/config.json" {
		t.Errorf("XDG path %q", got)
	}
}
