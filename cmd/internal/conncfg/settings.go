package conncfg

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/worker"
)

// Settings say how a command reaches Temporal, the store and the ledger.
// Defaults gives the values a command line starts from.
type Settings struct {
	TemporalAddress string // the Temporal frontend's host:port
	Namespace       string
	TaskQueue       string // the task queue graft's workers poll
	// DialTimeout bounds connecting to Temporal and the store's first listing.
	DialTimeout time.Duration
	TLS         TLSFiles // TLS to Temporal; plain TCP when none is set
	StoreDir    string   // the local-directory store, used when S3.Bucket is ""
	S3          S3Config // an S3 store, selected by S3.Bucket
	// DatabaseURL is the ledger's Postgres, from DATABASE_URL only: it may
	// carry a password, which must not show in ps.
	DatabaseURL string
	// DBSchema holds the ledger's tables; "" is the connection's default
	// (normally public).
	DBSchema string
}

// TLSFiles configures TLS to Temporal. Any field set turns TLS on.
type TLSFiles struct {
	// Enabled turns TLS on with the system's roots even when no file is given.
	Enabled bool
	// CertFile and KeyFile are a PEM client certificate and its key, given together.
	CertFile, KeyFile string
	// CAFile is a PEM bundle of roots that replaces the system's.
	CAFile string
	// ServerName overrides the name checked in the server's certificate
	// (default: the address's host).
	ServerName string
}

// On reports whether TLS is configured at all.
func (t TLSFiles) On() bool {
	return t.Enabled || t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" || t.ServerName != ""
}

// S3Config selects an S3-compatible store. Credentials are never configured
// here: the AWS SDK's standard chain supplies them (AWS_ACCESS_KEY_ID,
// AWS_PROFILE, an instance role).
type S3Config struct {
	Endpoint  string // "" is AWS
	Bucket    string // holds every object; setting it selects S3
	Prefix    string // a key prefix inside the bucket, without leading or trailing '/'
	Region    string // signing region; "" is us-east-1
	PathStyle bool   // address the bucket in the URL path
}

// Defaults of the shared settings.
const (
	DefaultTemporalAddress = "127.0.0.1:7233"
	DefaultNamespace       = "default"
	DefaultStoreDir        = "./.graft-data"
	DefaultDialTimeout     = 10 * time.Second
)

// Defaults returns the settings a command line starts from.
func Defaults() Settings {
	return Settings{
		TemporalAddress: DefaultTemporalAddress,
		Namespace:       DefaultNamespace,
		TaskQueue:       worker.DefaultTaskQueue,
		DialTimeout:     DefaultDialTimeout,
		StoreDir:        DefaultStoreDir,
		DatabaseURL:     catalog.DefaultDatabaseURL,
	}
}

// Flag names of the shared settings.
const (
	FlagTemporalAddress = "temporal-address"
	FlagNamespace       = "namespace"
	FlagTaskQueue       = "task-queue"
	FlagDialTimeout     = "dial-timeout"
	FlagTLS             = "tls"
	FlagTLSCert         = "tls-cert"
	FlagTLSKey          = "tls-key"
	FlagTLSCA           = "tls-ca"
	FlagTLSServerName   = "tls-server-name"
	FlagStoreDir        = "store-dir"
	FlagS3Endpoint      = "s3-endpoint"
	FlagS3Bucket        = "s3-bucket"
	FlagS3Prefix        = "s3-prefix"
	FlagS3Region        = "s3-region"
	FlagS3PathStyle     = "s3-path-style"
	FlagDBSchema        = "db-schema"
)

// EnvDatabaseURL is the only source of the database URL.
const EnvDatabaseURL = catalog.DatabaseURLEnv

var sharedFlags = []string{FlagTemporalAddress, FlagNamespace, FlagTaskQueue, FlagDialTimeout, FlagTLS, FlagTLSCert,
	FlagTLSKey, FlagTLSCA, FlagTLSServerName, FlagStoreDir, FlagS3Endpoint, FlagS3Bucket, FlagS3Prefix, FlagS3Region,
	FlagS3PathStyle, FlagDBSchema}

var sharedEnv = EnvNames()

// AddTemporalFlags adds the flags of the Temporal settings to fs, bound to s.
func (s *Settings) AddTemporalFlags(fs *pflag.FlagSet) {
	u := sharedEnv.Usage
	fs.StringVar(&s.TemporalAddress, FlagTemporalAddress, s.TemporalAddress, u(FlagTemporalAddress, "Temporal frontend host:port"))
	fs.StringVar(&s.Namespace, FlagNamespace, s.Namespace, u(FlagNamespace, "Temporal namespace"))
	fs.StringVar(&s.TaskQueue, FlagTaskQueue, s.TaskQueue, u(FlagTaskQueue, "Temporal task queue graft's workers poll"))
	fs.DurationVar(&s.DialTimeout, FlagDialTimeout, s.DialTimeout,
		u(FlagDialTimeout, "give up connecting to Temporal, or waiting for the store's first answer, after this long"))
	fs.BoolVar(&s.TLS.Enabled, FlagTLS, s.TLS.Enabled,
		u(FlagTLS, "use TLS to Temporal with the system's roots (implied by any --tls-* flag)"))
	fs.StringVar(&s.TLS.CertFile, FlagTLSCert, s.TLS.CertFile,
		u(FlagTLSCert, "PEM client certificate for mTLS to Temporal (with --tls-key)"))
	fs.StringVar(&s.TLS.KeyFile, FlagTLSKey, s.TLS.KeyFile, u(FlagTLSKey, "PEM private key of --tls-cert"))
	fs.StringVar(&s.TLS.CAFile, FlagTLSCA, s.TLS.CAFile,
		u(FlagTLSCA, "PEM roots to verify Temporal's certificate, instead of the system's"))
	fs.StringVar(&s.TLS.ServerName, FlagTLSServerName, s.TLS.ServerName,
		u(FlagTLSServerName, "server name expected in Temporal's certificate (default: the address's host)"))
}

// AddStoreFlags adds the flags of the store settings to fs, bound to s.
func (s *Settings) AddStoreFlags(fs *pflag.FlagSet) {
	u := sharedEnv.Usage
	fs.StringVar(&s.StoreDir, FlagStoreDir, s.StoreDir, u(FlagStoreDir, "local directory store (exclusive with --s3-*)"))
	fs.StringVar(&s.S3.Endpoint, FlagS3Endpoint, s.S3.Endpoint,
		u(FlagS3Endpoint, "S3 endpoint URL (default: AWS); credentials come from the AWS SDK's standard chain"))
	fs.StringVar(&s.S3.Bucket, FlagS3Bucket, s.S3.Bucket, u(FlagS3Bucket, "S3 bucket; setting it selects the S3 store"))
	fs.StringVar(&s.S3.Prefix, FlagS3Prefix, s.S3.Prefix,
		u(FlagS3Prefix, "key prefix inside the bucket, without leading or trailing '/'"))
	fs.StringVar(&s.S3.Region, FlagS3Region, s.S3.Region, u(FlagS3Region, "S3 signing region (default us-east-1)"))
	fs.BoolVar(&s.S3.PathStyle, FlagS3PathStyle, s.S3.PathStyle,
		u(FlagS3PathStyle, "address the bucket in the URL path (MinIO, versitygw)"))
}

// AddLedgerFlags adds --db-schema to fs, bound to s; the database itself
// has no flag.
func (s *Settings) AddLedgerFlags(fs *pflag.FlagSet) {
	fs.StringVar(&s.DBSchema, FlagDBSchema, s.DBSchema, sharedEnv.Usage(FlagDBSchema,
		"Postgres schema holding the ledger's tables; empty means the connection's default (public); "+
			"the database comes from $"+EnvDatabaseURL))
}
