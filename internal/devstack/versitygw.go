package devstack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
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
	// IAMDir turns on versitygw's internal IAM, its accounts kept in this
	// directory, so accounts other than root can be created (CreateUser)
	// and granted access by bucket policies (SetBucketPolicy). Defaults to
	// "": root is the only account.
	IAMDir string
}

// VersityGW is a running versitygw server.
type VersityGW struct {
	S3Server
	bin string
	iam bool
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
	var iamArgs []string
	if o.IAMDir != "" {
		if err := os.MkdirAll(o.IAMDir, 0o700); err != nil {
			return nil, fmt.Errorf("start versitygw: %w", err)
		}
		iamArgs = []string{"--iam-dir", o.IAMDir}
	}
	return retryPorts(o.Port == 0, func(bool) (*VersityGW, error) {
		port := o.Port
		if port == 0 {
			if port, err = FreePort(); err != nil {
				return nil, fmt.Errorf("start versitygw: %w", err)
			}
		}
		endpoint := "http://" + hostPort(port)
		p, err := StartProcess(ctx, "versitygw", bin, append(append([]string{"--port", hostPort(port)}, iamArgs...), "posix", o.Dir),
			[]string{"ROOT_ACCESS_KEY=" + accessKey, "ROOT_SECRET_KEY=" + secretKey}, "", "", 30*time.Second,
			func(ctx context.Context) error {
				_, err := get(ctx, endpoint) // any HTTP answer (403 without credentials) means it is serving
				return err
			})
		if err != nil {
			return nil, err
		}
		return &VersityGW{S3Server{Process: p, Endpoint: endpoint, Region: "us-east-1", AccessKey: accessKey, SecretKey: secretKey},
			bin, o.IAMDir != ""}, nil
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

// CreateUser creates an account of role "user" through versitygw's admin API,
// as `versitygw admin create-user` does. Such an account may do only what a
// bucket policy grants it. It needs a server started with an IAMDir.
func (g *VersityGW) CreateUser(ctx context.Context, accessKey, secretKey string) error {
	if !g.iam {
		return fmt.Errorf("create versitygw user %s: the server was started without an IAM directory", accessKey)
	}
	cmd := exec.CommandContext(ctx, g.bin, "admin", "--endpoint-url", g.Endpoint,
		"create-user", "--access", accessKey, "--secret", secretKey, "--role", "user")
	// The admin's credentials go by environment, out of the process list.
	cmd.Env = append(os.Environ(), "ADMIN_ACCESS_KEY="+g.AccessKey, "ADMIN_SECRET_KEY="+g.SecretKey)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("create versitygw user %s: %w: %s", accessKey, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// SetBucketPolicy installs policy (AWS bucket-policy JSON) on bucket, with
// the credentials of the bucket's owner.
func SetBucketPolicy(ctx context.Context, endpoint, region, accessKey, secretKey, bucket, policy string) error {
	cl := awss3.New(awss3.Options{BaseEndpoint: aws.String(endpoint), Region: region, UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(accessKey, secretKey, "")})
	_, err := cl.PutBucketPolicy(ctx, &awss3.PutBucketPolicyInput{Bucket: aws.String(bucket), Policy: aws.String(policy)})
	return err
}
