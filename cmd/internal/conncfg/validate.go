package conncfg

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/storage"
)

// ReadDatabaseURL sets s.DatabaseURL from DATABASE_URL when that is set and
// not empty, and to catalog.DefaultDatabaseURL when it is still empty.
func (s *Settings) ReadDatabaseURL(lookup LookupEnv) {
	if v, ok := lookup(EnvDatabaseURL); ok && v != "" {
		s.DatabaseURL = v
	}
	if s.DatabaseURL == "" {
		s.DatabaseURL = catalog.DefaultDatabaseURL
	}
}

// ValidateLedger checks the database URL and the schema. The URL's error
// carries no password: pgconn redacts it.
func (s Settings) ValidateLedger(src *Sources) error {
	var errs []error
	if _, err := pgconn.ParseConfig(s.DatabaseURL); err != nil {
		errs = append(errs, fmt.Errorf("%s: %v", EnvDatabaseURL, err))
	}
	err := catalog.ValidateSchema(s.DBSchema)
	return errors.Join(append(errs, src.Check(err != nil, FlagDBSchema, "%v", err))...)
}

// ValidateTemporal checks the Temporal settings' values; it reads no file,
// ValidateTLSFiles does.
func (s Settings) ValidateTemporal(src *Sources) error {
	addr := CheckHostPort(s.TemporalAddress)
	errs := []error{src.Check(addr != nil, FlagTemporalAddress, "%v", addr),
		src.Check(strings.TrimSpace(s.Namespace) == "", FlagNamespace, "must not be empty"),
		src.Check(strings.TrimSpace(s.TaskQueue) == "", FlagTaskQueue, "must not be empty"),
		src.Check(s.DialTimeout <= 0, FlagDialTimeout, "must be positive, got %s", s.DialTimeout)}
	if (s.TLS.CertFile == "") != (s.TLS.KeyFile == "") {
		errs = append(errs, fmt.Errorf("%s and %s must be given together", src.Name(FlagTLSCert), src.Name(FlagTLSKey)))
	}
	return errors.Join(errs...)
}

// ValidateTLSFiles loads the TLS files now, so a missing or bad file is a
// configuration error naming its flag rather than a failure at dial time. A
// certificate without its key is left to ValidateTemporal.
func (s Settings) ValidateTLSFiles(src *Sources) error {
	_, err := s.TLS.load(src)
	return err
}

// ValidateStore checks that the store is either a local directory or S3,
// and the S3 settings' values.
func (s Settings) ValidateStore(src *Sources) error {
	s3Given := slices.DeleteFunc([]string{FlagS3Bucket, FlagS3Endpoint, FlagS3Prefix, FlagS3Region, FlagS3PathStyle},
		func(f string) bool { return !src.Given(f) })
	if len(s3Given) == 0 {
		return src.Check(strings.TrimSpace(s.StoreDir) == "", FlagStoreDir, "must not be empty")
	}
	var errs []error
	if src.Given(FlagStoreDir) {
		errs = append(errs, fmt.Errorf("%s and %s are mutually exclusive: the store is a local directory or S3, not both",
			src.Name(FlagStoreDir), src.Name(s3Given[0])))
	}
	if s.S3.Bucket == "" {
		errs = append(errs, fmt.Errorf("%s needs %s", src.Name(s3Given[0]), src.Name(FlagS3Bucket)))
		return errors.Join(errs...)
	}
	if s.S3.Prefix != "" {
		err := storage.ValidateKey(s.S3.Prefix)
		errs = append(errs, src.Check(err != nil, FlagS3Prefix, "%v", err))
	}
	if s.S3.Endpoint != "" {
		u, err := url.Parse(s.S3.Endpoint)
		errs = append(errs, src.Check(err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "",
			FlagS3Endpoint, "want an http:// or https:// URL, got %q", s.S3.Endpoint))
	}
	return errors.Join(errs...)
}

// CheckHostPort reports whether addr is host:port with a port.
func CheckHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Errorf("want host:port, got %q", addr)
	}
	return nil
}
