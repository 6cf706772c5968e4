package workercmd

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"sync"
	"testing"

	"github.com/graftworks/graft/cmd/internal/conncfg"
	"github.com/graftworks/graft/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testLogger collects a worker's logs and prints them only if the test fails.
func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker logs:\n%s", buf.String())
		}
	})
	return NewLogger(buf, slog.LevelInfo)
}

// uniqueName returns prefix followed by random hex, for task queues and workflow ids.
func uniqueName(prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b[:])
}

// freeAddr returns a 127.0.0.1 address nothing listens on (it was free a moment ago).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatalf("close probe listener: %v", err)
	}
	return addr
}

// envMap is a conncfg.LookupEnv over a fixed map.
func envMap(m map[string]string) conncfg.LookupEnv {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}
