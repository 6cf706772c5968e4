package testenv

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
)

func TestMain(m *testing.M) { Main(m) }

func TestVersityGW_StartsAndCreatesBuckets(t *testing.T) {
	s := VersityGW(t)
	a, b := s.NewBucket(t), s.NewBucket(t)
	if a == b {
		t.Fatalf("two NewBucket calls returned the same bucket %q", a)
	}
	resp, err := http.Get(s.Endpoint)
	if err != nil {
		t.Fatalf("versitygw not answering at %s: %v", s.Endpoint, err)
	}
	resp.Body.Close()
	if s2 := VersityGW(t); s2 != s {
		t.Fatalf("VersityGW started a second server")
	}
}

func TestMinIO_StartsAndCreatesBuckets(t *testing.T) {
	s := MinIO(t)
	a, b := s.NewBucket(t), s.NewBucket(t)
	if a == b {
		t.Fatalf("two NewBucket calls returned the same bucket %q", a)
	}
	resp, err := http.Get(s.Endpoint + "/minio/health/live")
	if err != nil {
		t.Fatalf("minio not answering at %s: %v", s.Endpoint, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("minio health: %s", resp.Status)
	}
	if s2 := MinIO(t); s2 != s {
		t.Fatalf("MinIO started a second server")
	}
}

func TestTemporal_StartsWithNamespace(t *testing.T) {
	ts := Temporal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: ts.HostPort, Namespace: ts.Namespace})
	if err != nil {
		t.Fatalf("dial %s: %v", ts.HostPort, err)
	}
	defer c.Close()
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		t.Fatalf("health: %v", err)
	}
}
