package workercmd

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/graftworks/graft/internal/catalog"
)

// healthPingTimeout bounds the ledger ping of one /healthz request.
const healthPingTimeout = 2 * time.Second

type workerState int32

const (
	stateStarting workerState = iota
	stateRunning
	stateStopping
)

func (s workerState) String() string { return [...]string{"starting", "running", "stopping"}[s] }

// health answers /healthz: 200 only while the worker polls and the ledger
// answers a ping, 503 otherwise; the JSON body says which part is not ready.
type health struct {
	state   atomic.Int32
	catalog atomic.Pointer[catalog.Catalog]
}

// healthReport is /healthz's body.
type healthReport struct {
	Status  string `json:"status"`  // "ok" or "unavailable"
	Worker  string `json:"worker"`  // "starting", "running" or "stopping"
	Catalog string `json:"catalog"` // "ok", "not open", or the ping's error
}

func (h *health) setState(s workerState) { h.state.Store(int32(s)) }

func (h *health) check(ctx context.Context) (healthReport, bool) {
	state := workerState(h.state.Load())
	r := healthReport{Status: "unavailable", Worker: state.String(), Catalog: "not open"}
	if c := h.catalog.Load(); c != nil {
		ctx, cancel := context.WithTimeout(ctx, healthPingTimeout)
		defer cancel()
		r.Catalog = "ok"
		if err := c.Ping(ctx); err != nil {
			r.Catalog = err.Error()
		}
	}
	ok := state == stateRunning && r.Catalog == "ok"
	if ok {
		r.Status = "ok"
	}
	return r, ok
}

func (h *health) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r, ok := h.check(req.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	code := http.StatusServiceUnavailable
	if ok {
		code = http.StatusOK
	}
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(r)
}
