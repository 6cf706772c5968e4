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
	if err := catalog.ValidateSchema(s.DBSchema); err != nil {
		errs = append(errs, fmt.Errorf("%s: %v", src.Name(FlagDBSchema), err))
	}
	return errors.Join(errs...)
}

// ValidateTemporal checks the Temporal settings' values: the address, the
// namespace, the task queue, the dial timeout, and that a client certificate
// comes with its key. It reads no file; ValidateTLSFiles does.
func (s Settings) ValidateTemporal(src *Sources) error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", src.Name(flag), fmt.Sprintf(format, args...)))
	}
	if err := CheckHostPort(s.TemporalAddress); err != nil {
		bad(FlagTemporalAddress, "%v", err)
	}
	if strings.TrimSpace(s.Namespace) == "" {
		bad(FlagNamespace, "must not be empty")
	}
	if strings.TrimSpace(s.TaskQueue) == "" {
		bad(FlagTaskQueue, "must not be empty")
	}
	if s.DialTimeout <= 0 {
		bad(FlagDialTimeout, "must be positive, got %s", s.DialTimeout)
	}
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
		if strings.TrimSpace(s.StoreDir) == "" {
			return fmt.Errorf("%s: must not be empty", src.Name(FlagStoreDir))
		}
		return nil
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
		if err := storage.ValidateKey(s.S3.Prefix); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", src.Name(FlagS3Prefix), err))
		}
	}
	if s.S3.Endpoint != "" {
		u, err := url.Parse(s.S3.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s: want an http:// or https:// URL, got %q", src.Name(FlagS3Endpoint), s.S3.Endpoint))
		}
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
