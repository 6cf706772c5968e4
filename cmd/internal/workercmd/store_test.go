package workercmd

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
)

func TestOpenStore_S3_CredentialsFromEnvironment_WrongBucketFailsAtStart(t *testing.T) {
	gw := testenv.VersityGW(t)
	bucket := gw.NewBucket(t)
	// Credentials only through the AWS SDK's standard chain; no shared files.
	none := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
	t.Setenv("AWS_ACCESS_KEY_ID", gw.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", gw.SecretKey)

	cfg, err := LoadConfig([]string{"--s3-endpoint", gw.Endpoint, "--s3-bucket", bucket,
		"--s3-prefix", "graft", "--s3-region", gw.Region, "--s3-path-style"}, envMap(nil))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	cfg.DialTimeout = 10 * time.Second
	ctx := context.Background()
	store, err := cfg.OpenStore(ctx)
	if err != nil {
		t.Fatalf("OpenStore: %v", err)
	}
	if _, err := store.Put(ctx, "g/graph.json", []byte("{}"), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("put through the S3 store: %v", err)
	}
	page, err := store.List(ctx, storage.ListOptions{})
	if err != nil || len(page.Objects) != 1 || page.Objects[0].Key != "g/graph.json" {
		t.Fatalf("list = %+v, %v; want the one object put", page, err)
	}

	missing := cfg
	missing.S3.Bucket = "graft-no-such-bucket-" + strings.ToLower(uniqueName(""))
	_, err = missing.OpenStore(ctx)
	if err == nil || !strings.Contains(err.Error(), "check store s3://"+missing.S3.Bucket+"/graft at "+gw.Endpoint) {
		t.Errorf("missing bucket: err = %v, want a failed store check naming the bucket and endpoint", err)
	}

	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
	_, err = cfg.OpenStore(ctx)
	if err == nil || !strings.Contains(err.Error(), "check store s3://"+bucket) {
		t.Errorf("wrong credentials: err = %v, want a failed store check naming the bucket", err)
	}
	if err != nil && (strings.Contains(err.Error(), gw.SecretKey) || strings.Contains(err.Error(), "not-the-secret")) {
		t.Errorf("error repeats a secret key: %v", err)
	}
}
