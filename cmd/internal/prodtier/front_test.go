package prodtier

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
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
// or until Heal, then forwarded (and faulted if their prefix still is).
type s3Front struct {
	URL    string
	bucket string

	mu       sync.Mutex
	prefixes []string
	faulted  int
	delays   map[string]time.Duration
	holding  int           // delayed PUTs not yet forwarded
	healed   chan struct{} // closed by Heal, releasing the held PUTs
	stored   int           // held PUTs the store then answered 200
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
		if r.Method == http.MethodPut && f.delayed(key) {
			// A held PUT is delivered even when its sender is gone by then, as a
			// network may deliver a request whose sender died.
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			f.hold(key)
			defer f.release()
			r = r.WithContext(context.WithoutCancel(r.Context()))
			r.Body = io.NopCloser(bytes.NewReader(body))
			if !f.faulting(key) {
				rec := &statusRecorder{ResponseWriter: w}
				proxy.ServeHTTP(rec, r)
				f.heldAnswered(rec.status)
				return
			}
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

// faulting reports whether a PUT of key would be faulted now.
func (f *s3Front) faulting(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.faults(key)
}

// faults reports whether a faulted prefix matches key; f.mu is held.
func (f *s3Front) faults(key string) bool {
	return slices.ContainsFunc(f.prefixes, func(p string) bool { return strings.HasPrefix(key, p) })
}

// heldAnswered counts a held PUT the store stored.
func (f *s3Front) heldAnswered(status int) {
	if status != http.StatusOK {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stored++
}

// Stored returns how many held PUTs the store answered 200 once forwarded.
func (f *s3Front) Stored() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stored
}

// statusRecorder notes the status a handler answers with.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

// fault reports whether a PUT of key is faulted, counting it.
func (f *s3Front) fault(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.faults(key) {
		return false
	}
	f.faulted++
	return true
}

// delayed reports whether a PUT of key is to be held.
func (f *s3Front) delayed(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.delayOf(key) > 0
}

func (f *s3Front) delayOf(key string) time.Duration {
	var d time.Duration
	for p, pd := range f.delays {
		if strings.HasPrefix(key, p) {
			d = pd
		}
	}
	return d
}

// hold holds a PUT of key for its delay, or until Heal; the caller releases it
// once forwarded.
func (f *s3Front) hold(key string) {
	f.mu.Lock()
	d := f.delayOf(key)
	f.holding++
	if f.healed == nil {
		f.healed = make(chan struct{})
	}
	healed := f.healed
	f.mu.Unlock()
	select {
	case <-time.After(d):
	case <-healed:
	}
}

func (f *s3Front) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holding--
}

// DelayPuts holds PUTs of keys starting with prefix for d, or until Heal,
// before forwarding them.
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

// Heal forwards every request again, the held PUTs too.
func (f *s3Front) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prefixes, f.delays = nil, nil
	if f.healed != nil {
		close(f.healed)
		f.healed = nil
	}
}

// Faulted returns how many PUTs the front has faulted.
func (f *s3Front) Faulted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.faulted
}
