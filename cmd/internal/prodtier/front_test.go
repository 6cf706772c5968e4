package prodtier

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// s3Front is an HTTP front between one worker process and versitygw. It
// forwards every request untouched (the Host header too, so signatures
// hold), except PUTs of keys under a faulted prefix: those it answers 503
// without forwarding — the write did not happen, and the worker cannot know
// that, so the put is ambiguous (storage.CodeAmbiguous), as a gateway or
// network failure makes it. PUTs under a delayed prefix are held that long,
// then forwarded.
type s3Front struct {
	URL    string
	bucket string

	mu       sync.Mutex
	prefixes []string
	faulted  int
	last     time.Time
	delays   map[string]time.Duration
	holding  int // delayed PUTs not yet forwarded
}

func newS3Front(t testing.TB, target, bucket string) *s3Front {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	f := &s3Front{bucket: bucket}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.URL.Path, "/"+f.bucket+"/")
		if r.Method == http.MethodPut && f.delay(key) {
			defer f.release()
		}
		if r.Method == http.MethodPut && f.fault(key) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code>`+
				`<Message>injected by the production-shape tier's S3 front</Message></Error>`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// fault reports whether a PUT of key is faulted, counting it.
func (f *s3Front) fault(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.prefixes {
		if strings.HasPrefix(key, p) {
			f.faulted++
			f.last = time.Now()
			return true
		}
	}
	return false
}

// delay holds a PUT of key if a delayed prefix matches it, reporting whether
// it did; the caller releases it once forwarded.
func (f *s3Front) delay(key string) bool {
	f.mu.Lock()
	var d time.Duration
	for p, pd := range f.delays {
		if strings.HasPrefix(key, p) {
			d = pd
		}
	}
	if d == 0 {
		f.mu.Unlock()
		return false
	}
	f.holding++
	f.mu.Unlock()
	time.Sleep(d)
	return true
}

func (f *s3Front) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holding--
}

// DelayPuts holds PUTs of keys starting with prefix for d before forwarding
// them, until Heal.
func (f *s3Front) DelayPuts(prefix string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.delays == nil {
		f.delays = map[string]time.Duration{}
	}
	f.delays[prefix] = d
}

// Holding returns how many delayed PUTs are being held now.
func (f *s3Front) Holding() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holding
}

// FailPuts makes PUTs of keys starting with prefix ambiguous until Heal.
func (f *s3Front) FailPuts(prefix string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prefixes = append(f.prefixes, prefix)
}

// Heal forwards every request again.
func (f *s3Front) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prefixes, f.delays = nil, nil
}

// Faulted returns how many PUTs the front has faulted, and when the last was.
func (f *s3Front) Faulted() (int, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.faulted, f.last
}
