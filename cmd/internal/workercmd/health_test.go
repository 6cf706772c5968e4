package workercmd

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

func getHealth(t *testing.T, h *health) (int, healthReport) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), "GET", "/healthz", nil))
	var r healthReport
	if err := json.NewDecoder(rec.Result().Body).Decode(&r); err != nil {
		t.Fatalf("decode /healthz body: %v", err)
	}
	return rec.Code, r
}

func TestHealthz_OKOnlyWhileRunningWithALedgerThatPings(t *testing.T) {
	cat := catalogtest.Open(t)
	h := &health{}

	if code, r := getHealth(t, h); code != http.StatusServiceUnavailable || r.Worker != "starting" || r.Catalog != "not open" {
		t.Errorf("before start: %d %+v, want 503 starting / not open", code, r)
	}
	h.catalog.Store(cat)
	if code, r := getHealth(t, h); code != http.StatusServiceUnavailable || r.Worker != "starting" || r.Catalog != "ok" {
		t.Errorf("ledger open, worker starting: %d %+v, want 503 starting / ok", code, r)
	}
	h.worker.Store("running")
	if code, r := getHealth(t, h); code != http.StatusOK || r.Status != "ok" || r.Worker != "running" || r.Catalog != "ok" {
		t.Errorf("running: %d %+v, want 200 ok / running / ok", code, r)
	}
	cat.Close() // the ledger no longer answers
	if code, r := getHealth(t, h); code != http.StatusServiceUnavailable || r.Worker != "running" || r.Catalog == "ok" {
		t.Errorf("ledger closed: %d %+v, want 503 with the ping's error", code, r)
	}
	h.worker.Store("stopping")
	if code, r := getHealth(t, h); code != http.StatusServiceUnavailable || r.Worker != "stopping" {
		t.Errorf("stopping: %d %+v, want 503 stopping", code, r)
	}
}
