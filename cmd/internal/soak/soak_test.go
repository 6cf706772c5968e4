package soak_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/graftworks/graft/cmd/internal/soak"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage/s3"
)

func TestMain(m *testing.M) {
	soak.MaybeChild()
	testenv.Main(m)
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return def
}

// TestSoak runs GRAFT_SOAK_SEEDS seeds (default 200) on each backend in
// GRAFT_SOAK_BACKENDS (default localfs,versitygw), GRAFT_SOAK_PARALLEL at once (default
// 8), from GRAFT_SOAK_FROM (default 1): every schedule must quiesce with no violation
// of the oracle (docs/testing.md).
func TestSoak(t *testing.T) {
	soak.StepKnobs()
	seeds := envInt("GRAFT_SOAK_SEEDS", 200)
	parallel := envInt("GRAFT_SOAK_PARALLEL", 8)
	from := uint64(envInt("GRAFT_SOAK_FROM", 1))
	backends := strings.Split(os.Getenv("GRAFT_SOAK_BACKENDS"), ",")
	if os.Getenv("GRAFT_SOAK_BACKENDS") == "" {
		backends = []string{string(soak.LocalFS), string(soak.VersityGW)}
	}
	ts := testenv.Temporal(t)
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
			defer cancel()
			cfg := soak.StackConfig{Backend: soak.Backend(b), Dir: t.TempDir(), TemporalHostPort: ts.HostPort, Namespace: ts.Namespace}
			if cfg.Backend == soak.VersityGW {
				srv := testenv.VersityGW(t)
				cfg.S3 = s3.Config{Endpoint: srv.Endpoint, Region: srv.Region, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}
			}
			st, err := soak.Start(ctx, cfg)
			if err != nil {
				t.Fatalf("stack: %v", err)
			}
			defer st.Close()
			tot := soak.Soak(ctx, st, soak.Config{Backend: cfg.Backend, From: from, Seeds: seeds, Parallel: parallel, Out: testWriter{t}})
			t.Log("\n" + tot.Summary())
			for _, f := range tot.Failures {
				t.Error(f.String())
			}
			if tot.Passed+len(tot.Failures) != seeds {
				t.Errorf("ran %d of %d seeds", tot.Passed+len(tot.Failures), seeds)
			}
		})
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
