package devstack

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/graftworks/graft/internal/tools"
)

// MinIOOptions configure a MinIO S3 server.
type MinIOOptions struct {
	Dir  string // the single drive MinIO keeps buckets, objects and uploads in; required
	Port int    // of the S3 API at 127.0.0.1; defaults to a free port
}

// S3Server is a running S3 server: MinIO (one drive, one node) or versitygw.
type S3Server struct {
	*Process
	Endpoint             string // http://127.0.0.1:PORT
	Region               string
	AccessKey, SecretKey string // the root account's
}

// minioEnv keeps MinIO offline and light: no update check, no console, no
// call home, the data scanner at its slowest, and MINIO_CI_CD, which skips
// the root-drive check a temporary directory fails and caps MinIO's buffer
// pool at 256 MiB instead of half the machine's memory.
var minioEnv = []string{
	"MINIO_UPDATE=off",
	"MINIO_BROWSER=off",
	"MINIO_CALLHOME_ENABLE=off",
	"MINIO_SCANNER_SPEED=slowest",
	"MINIO_CI_CD=on",
}

// StartMinIO builds MinIO if needed, starts it on o.Dir and waits until its
// object layer is up.
func StartMinIO(ctx context.Context, o MinIOOptions) (*S3Server, error) {
	const user, password = "graft", "graft-secret" // the root credentials (a password has at least 8 bytes)
	bin, err := tools.MinIO.Ensure(ctx)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("start minio: %w", err)
	}
	return retryPorts(o.Port == 0, func(bool) (*S3Server, error) {
		port := o.Port
		if port == 0 {
			if port, err = FreePort(); err != nil {
				return nil, fmt.Errorf("start minio: %w", err)
			}
		}
		// The console is off (MINIO_BROWSER), but an address of its own keeps
		// MinIO from choosing one on every interface.
		console, err := FreePort()
		if err != nil {
			return nil, fmt.Errorf("start minio: %w", err)
		}
		endpoint := "http://" + hostPort(port)
		env := append([]string{"MINIO_ROOT_USER=" + user, "MINIO_ROOT_PASSWORD=" + password}, minioEnv...)
		p, err := StartProcess(ctx, "minio", bin,
			[]string{"server", "--quiet", "--address", hostPort(port), "--console-address", hostPort(console), o.Dir},
			env, "", "", time.Minute,
			func(ctx context.Context) error {
				// 200 once the object layer serves requests; 503 while it starts.
				resp, err := get(ctx, endpoint+"/minio/health/cluster")
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("health: %s", resp.Status)
				}
				return err
			})
		if err != nil {
			return nil, err
		}
		return &S3Server{Process: p, Endpoint: endpoint, Region: "us-east-1", AccessKey: user, SecretKey: password}, nil
	})
}
