package graph

import (
	"context"
	"errors"
	"testing"

	"github.com/graftworks/graft/storage"
)

func TestPutIfAbsent_OutcomesByKeyState(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	res, err := PutIfAbsent(ctx, s, "k/a", []byte("ours"))
	if err != nil || res.Outcome != PutCreated || res.ETag == "" {
		t.Fatalf("absent key: %+v, %v; want created", res, err)
	}
	res, err = PutIfAbsent(ctx, s, "k/a", []byte("ours"))
	if err != nil || res.Outcome != PutAlreadyOurs {
		t.Fatalf("our bytes there: %+v, %v; want already_ours", res, err)
	}
	res, err = PutIfAbsent(ctx, s, "k/a", []byte("mine"))
	if err != nil || res.Outcome != PutTaken || string(res.Existing) != "ours" {
		t.Fatalf("other bytes there: %+v, %v; want taken with the existing bytes", res, err)
	}
}

func TestPutIfAbsent_Refused_IsReturnedWithoutRetry(t *testing.T) {
	f := withFaults(newStore(t), &faultRule{match: func(string) bool { return true }, mode: refuse, times: 1})
	c := &countingStore{Store: f}
	_, err := PutIfAbsent(context.Background(), c, "k/a", []byte("x"))
	if !errors.Is(err, storage.ErrRefused) || c.puts.Load() != 1 || c.gets.Load() != 0 {
		t.Fatalf("error %v after %d puts and %d gets; want ErrRefused after 1 put, no read-back", err, c.puts.Load(), c.gets.Load())
	}
}

func TestPutIfAbsent_InvalidKey_IsErrInvalidKey(t *testing.T) {
	if _, err := PutIfAbsent(context.Background(), newStore(t), "a//b", []byte("x")); !errors.Is(err, storage.ErrInvalidKey) {
		t.Fatalf("error %v, want storage.ErrInvalidKey", err)
	}
}

func TestPutIfAbsent_CancelledContext_IsInDoubt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := PutIfAbsent(ctx, newStore(t), "k/a", []byte("x"))
	var d *InDoubtError
	if !errors.As(err, &d) || !errors.Is(err, storage.ErrAmbiguous) || !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want *InDoubtError wrapping context.Canceled", err)
	}
}
