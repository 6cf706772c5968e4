package devstack

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/graftworks/graft/internal/tools"
)

// VersityOptions configure a versitygw S3 server.
type VersityOptions struct {
	Dir  string // the posix backend's root, each bucket a directory in it; required
	Port int    // at 127.0.0.1; defaults to a free port
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
	const accessKey, secretKey = "graft", "graft-secret" // the root credentials
	bin, err := tools.VersityGW.Ensure(ctx)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	return retryPorts(o.Port == 0, func(bool) (*VersityGW, error) {
		port := o.Port
		if port == 0 {
			if port, err = FreePort(); err != nil {
				return nil, fmt.Errorf("start versitygw: %w", err)
			}
		}
		endpoint := "http://" + hostPort(port)
		p, err := startProcess(ctx, "versitygw", bin, []string{"--port", hostPort(port), "posix", o.Dir},
			[]string{"ROOT_ACCESS_KEY=" + accessKey, "ROOT_SECRET_KEY=" + secretKey}, "", "", 30*time.Second,
			func(ctx context.Context) error {
				_, err := get(ctx, endpoint) // any HTTP answer (403 without credentials) means it is serving
				return err
			})
		if err != nil {
			return nil, err
		}
		return &VersityGW{Process: p, Endpoint: endpoint, Region: "us-east-1", AccessKey: accessKey, SecretKey: secretKey}, nil
	})
}

// CreateBucket creates bucket on the S3 server at endpoint (path style, static
// credentials), as versitygw's root.
func CreateBucket(ctx context.Context, endpoint, region, accessKey, secretKey, bucket string) error {
	cl := awss3.New(awss3.Options{BaseEndpoint: aws.String(endpoint), Region: region, UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(accessKey, secretKey, "")})
	_, err := cl.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(bucket)})
	return err
}
