package conncfg

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	sdkclient "go.temporal.io/sdk/client"

	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/localfs"
	"github.com/graftworks/graft/storage/s3"
)

// Config builds the TLS configuration for Temporal, or nil for plain TCP.
// Its errors name the flag of the file that did not load.
func (t TLSFiles) Config() (*tls.Config, error) {
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, fmt.Errorf("--%s and --%s must be given together", FlagTLSCert, FlagTLSKey)
	}
	return t.load(nil)
}

// load builds the TLS configuration, reading every file given; errors name
// the files' flags as src has them. A certificate without its key is skipped.
func (t TLSFiles) load(src *Sources) (*tls.Config, error) {
	if !t.On() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	var errs []error
	if t.CertFile != "" && t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s, %s: %w", src.Name(FlagTLSCert), src.Name(FlagTLSKey), err))
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if t.CAFile != "" {
		cfg.RootCAs = x509.NewCertPool()
		pem, err := os.ReadFile(t.CAFile)
		if err == nil && !cfg.RootCAs.AppendCertsFromPEM(pem) {
			err = fmt.Errorf("no PEM certificate in %s", t.CAFile)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", src.Name(FlagTLSCA), err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ClientOptions returns opts with the Temporal address, namespace and TLS of
// s. Its only error is a TLS file that does not load: a configuration error.
func (s Settings) ClientOptions(opts sdkclient.Options) (sdkclient.Options, error) {
	tlsCfg, err := s.TLS.Config()
	if err != nil {
		return sdkclient.Options{}, err
	}
	opts.HostPort = s.TemporalAddress
	opts.Namespace = s.Namespace
	opts.ConnectionOptions.TLS = tlsCfg
	return opts, nil
}

// DialTemporal connects to Temporal with opts (from ClientOptions), giving
// up after s.DialTimeout; its error names the address.
func (s Settings) DialTemporal(ctx context.Context, opts sdkclient.Options) (sdkclient.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, s.DialTimeout)
	defer cancel()
	tc, err := sdkclient.DialContext(dctx, opts)
	if err != nil {
		if ctx.Err() == nil && errors.Is(dctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("dial temporal at %s: no answer within %s (--%s): %w",
				opts.HostPort, s.DialTimeout, FlagDialTimeout, err)
		}
		return nil, fmt.Errorf("dial temporal at %s: %w", opts.HostPort, err)
	}
	return tc, nil
}

// OpenStore opens the store s selects and checks within s.DialTimeout that
// it answers a listing, so a wrong directory, endpoint, bucket or credential
// shows before any work.
func (s Settings) OpenStore(ctx context.Context) (storage.Store, error) {
	var st storage.Store
	var err error
	if s.S3.Bucket == "" {
		st, err = localfs.Open(s.StoreDir)
	} else {
		c := s.S3
		st, err = s3.New(ctx, s3.Config{Endpoint: c.Endpoint, Region: c.Region, Bucket: c.Bucket, Prefix: c.Prefix,
			PathStyle: c.PathStyle})
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", s.DescribeStore(), err)
	}
	pctx, cancel := context.WithTimeout(ctx, s.DialTimeout)
	defer cancel()
	if _, err := st.List(pctx, storage.ListOptions{Limit: 1}); err != nil {
		return nil, fmt.Errorf("check store %s: %w", s.DescribeStore(), err)
	}
	return st, nil
}

// DescribeStore names the store for logs and messages ("dir /abs/path" or
// "s3://bucket/prefix at endpoint"); it carries no credential.
func (s Settings) DescribeStore() string {
	if s.S3.Bucket == "" {
		if abs, err := filepath.Abs(s.StoreDir); err == nil {
			return "dir " + abs
		}
		return "dir " + s.StoreDir
	}
	where := "s3://" + s.S3.Bucket
	if s.S3.Prefix != "" {
		where += "/" + s.S3.Prefix
	}
	if s.S3.Endpoint != "" {
		where += " at " + s.S3.Endpoint
	}
	return where
}
