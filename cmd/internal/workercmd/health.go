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

// health answers /healthz: 200 only while the worker polls and the ledger
// answers a ping, 503 otherwise; the JSON body says which part is not ready.
type health struct {
	worker  atomic.Value // "running", then "stopping"; unset while starting
	catalog atomic.Pointer[catalog.Catalog]
}

// healthReport is /healthz's body.
type healthReport struct {
	Status  string `json:"status"`  // "ok" or "unavailable"
	Worker  string `json:"worker"`  // "starting", "running" or "stopping"
	Catalog string `json:"catalog"` // "ok", "not open", or the ping's error
}

func (h *health) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r := healthReport{Status: "unavailable", Worker: "starting", Catalog: "not open"}
	if s, ok := h.worker.Load().(string); ok {
		r.Worker = s
	}
	if c := h.catalog.Load(); c != nil {
		ctx, cancel := context.WithTimeout(req.Context(), healthPingTimeout)
		defer cancel()
		r.Catalog = "ok"
		if err := c.Ping(ctx); err != nil {
			r.Catalog = err.Error()
		}
	}
	code := http.StatusServiceUnavailable
	if r.Worker == "running" && r.Catalog == "ok" {
		r.Status, code = "ok", http.StatusOK
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(r)
}
