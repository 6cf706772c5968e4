package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/graftworks/graft/storage"
)

// ErrNotHeld is returned by Release on a put already released or dropped.
var ErrNotHeld = errors.New("faults: put no longer held")

// HeldPut is a put kept in flight by a Hold fault, its caller told ambiguous.
type HeldPut struct {
	s    *Store
	key  string
	body []byte
	opts storage.PutOptions
	rule string
}

// Key returns the held put's key.
func (h *HeldPut) Key() string { return h.key }

// Body returns a copy of the held put's bytes.
func (h *HeldPut) Body() []byte { return append([]byte(nil), h.body...) }

// Options returns the held put's conditions, which Release applies.
func (h *HeldPut) Options() storage.PutOptions { return h.opts }

// Rule returns the name of the rule that held the put.
func (h *HeldPut) Rule() string { return h.rule }

// Release applies the put to the inner store now, with its original
// conditions, and returns its answer; ErrNotHeld once released or dropped.
func (h *HeldPut) Release(ctx context.Context) (storage.PutResult, error) {
	if !h.s.unhold(h) {
		return storage.PutResult{}, ErrNotHeld
	}
	return h.s.inner.Put(ctx, h.key, h.body, h.opts)
}

// Drop discards the put, never applied, as when a request dies in the network.
func (h *HeldPut) Drop() { h.s.unhold(h) }

func (s *Store) hold(key string, body []byte, opts storage.PutOptions, rule string) {
	h := &HeldPut{s: s, key: key, body: append([]byte(nil), body...), opts: opts, rule: rule}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = append(s.held, h)
	s.notifyLocked()
}

// unhold removes h from the held puts, reporting whether it was there.
func (s *Store) unhold(h *HeldPut) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.held, h)
	if i < 0 {
		return false
	}
	s.held = slices.Delete(s.held, i, i+1)
	s.notifyLocked()
	return true
}

func (s *Store) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Held returns the puts held now, in order of arrival.
func (s *Store) Held() []*HeldPut {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*HeldPut(nil), s.held...)
}

// WaitHeld blocks until at least n puts are held at once, or ctx ends.
func (s *Store) WaitHeld(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		got, changed := len(s.held), s.changed
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("wait for %d held puts, have %d: %w", n, got, ctx.Err())
		}
	}
}
