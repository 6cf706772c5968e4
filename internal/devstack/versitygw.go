package devstack

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/graftworks/graft/internal/tools"
)

// VersityOptions configure a versitygw S3 server.
type VersityOptions struct {
	// Dir is the posix backend's root; each bucket is a directory in it. Required.
	Dir string
	// Port to listen on at 127.0.0.1. Defaults to a free port.
	Port int
}

// VersityGW is a running versitygw server.
type VersityGW struct {
	*Process
	Endpoint             string // http://127.0.0.1:PORT
	Region               string
	AccessKey, SecretKey string
}

// StartVersityGW builds versitygw if needed, starts it and waits until it answers HTTP.
func StartVersityGW(ctx context.Context, o VersityOptions) (*VersityGW, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("start versitygw: Dir is required")
	}
	const accessKey, secretKey = "graft", "graft-secret" // the root credentials
	bin, err := tools.VersityGW.Ensure(ctx)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // a free port can be taken between probe and bind
		port := o.Port
		if port == 0 {
			if port, err = FreePort(); err != nil {
				return nil, fmt.Errorf("start versitygw: %w", err)
			}
		}
		p, err := startProcess("versitygw", bin,
			[]string{"--port", hostPort(port), "posix", o.Dir},
			[]string{"ROOT_ACCESS_KEY=" + accessKey, "ROOT_SECRET_KEY=" + secretKey}, "", "")
		if err != nil {
			return nil, err
		}
		endpoint := "http://" + hostPort(port)
		err = p.waitReady(ctx, 30*time.Second, func(ctx context.Context) error {
			_, err := get(ctx, endpoint) // any HTTP answer (403 without credentials) means it is serving
			return err
		})
		if err == nil {
			return &VersityGW{Process: p, Endpoint: endpoint, Region: "us-east-1", AccessKey: accessKey, SecretKey: secretKey}, nil
		}
		p.Stop(5 * time.Second)
		lastErr = err
		if o.Port != 0 {
			break
		}
	}
	return nil, lastErr
}
