// Package memstore is an in-memory storage.Store with multipart uploads, for
// tests and benchmarks; it keeps the whole storage contract but nothing
// survives the process.
//
// Every method is atomic under one mutex, so conditional writes are
// linearisable. ETags are S3's: the MD5 of the bytes, or for a completed
// multipart upload the MD5 of the parts' MD5s and "-N". Bodies are copied in
// and out.
package memstore

import (
	"bytes"
	"cmp"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/graftworks/graft/storage"
)

// Store is an in-memory storage.Store; the zero value is not usable, call New.
type Store struct {
	mu      sync.Mutex
	objects map[string]object
	uploads map[string]*upload
	limits  storage.MultipartLimits
}

type object struct {
	body     []byte
	etag     string
	modified time.Time
}

type upload struct {
	key       string
	initiated time.Time
	parts     map[int]storage.Part
	bodies    map[int][]byte
}

var (
	_ storage.Store     = (*Store)(nil)
	_ storage.Multipart = (*Store)(nil)
)

// Option configures New.
type Option func(*Store)

// WithMultipartLimits sets the part rules (default storage.LocalMultipartLimits).
func WithMultipartLimits(l storage.MultipartLimits) Option { return func(s *Store) { s.limits = l } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{objects: map[string]object{}, uploads: map[string]*upload{}, limits: storage.LocalMultipartLimits}
	for _, o := range opts {
		o(s)
	}
	return s
}

func info(key string, o object) storage.ObjectInfo {
	return storage.ObjectInfo{Key: key, Size: int64(len(o.body)), ETag: o.etag, LastModified: o.modified}
}

// read returns the object at key for a Get or Head. Stored bodies are never
// changed in place, so the caller may copy one after the lock is released.
func (s *Store) read(ctx context.Context, op, key string) (object, error) {
	if err := storage.CheckRequest(ctx, op, key, false); err != nil {
		return object{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return o, storage.NewError(op, key, storage.CodeNotFound, errors.New("no such key"))
	}
	return o, nil
}

func (s *Store) Get(ctx context.Context, key string) (storage.Object, error) {
	o, err := s.read(ctx, "get", key)
	if err != nil {
		return storage.Object{}, err
	}
	return storage.Object{ObjectInfo: info(key, o), Body: bytes.Clone(o.body)}, nil
}

func (s *Store) Head(ctx context.Context, key string) (storage.ObjectInfo, error) {
	o, err := s.read(ctx, "head", key)
	if err != nil {
		return storage.ObjectInfo{}, err
	}
	return info(key, o), nil
}

func (s *Store) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	if err := cmp.Or(storage.CheckRequest(ctx, "put", key, true), storage.CheckPut(key, opts)); err != nil {
		return storage.PutResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, exists := s.objects[key]
	switch {
	case opts.IfNoneMatch && exists:
		return storage.PutResult{}, storage.NewError("put", key, storage.CodePreconditionFailed, errors.New("key exists, If-None-Match *"))
	case opts.IfMatch != "" && (!exists || cur.etag != opts.IfMatch):
		return storage.PutResult{}, storage.NewError("put", key, storage.CodePreconditionFailed, fmt.Errorf("If-Match %s does not match", opts.IfMatch))
	}
	o := object{body: bytes.Clone(body), etag: storage.ETagOf(body), modified: time.Now()}
	s.objects[key] = o
	return storage.PutResult{ETag: o.etag}, nil
}

func (s *Store) List(ctx context.Context, opts storage.ListOptions) (storage.ListPage, error) {
	limit, err := storage.CheckList(ctx, "list", opts.Prefix, opts.Limit)
	if err != nil {
		return storage.ListPage{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.objects {
		if strings.HasPrefix(k, opts.Prefix) && k > opts.StartAfter {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	page := storage.ListPage{}
	if len(keys) > limit {
		keys, page.Truncated = keys[:limit], true
	}
	for _, k := range keys {
		page.Objects = append(page.Objects, info(k, s.objects[k]))
	}
	return page, nil
}

func (s *Store) Delete(ctx context.Context, key string) error {
	if err := storage.CheckRequest(ctx, "delete", key, true); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objects, key)
	return nil
}

func (s *Store) DeleteBatch(ctx context.Context, keys []string) error {
	if err := storage.CheckBatch(keys); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil && len(keys) > 0 {
		return storage.ContextError("delete_batch", keys[0], true, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.objects, k)
	}
	return nil
}

// Len returns the number of objects stored.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objects)
}

func (s *Store) MultipartLimits() storage.MultipartLimits { return s.limits }

func (s *Store) CreateMultipart(ctx context.Context, key string) (string, error) {
	if err := storage.CheckRequest(ctx, "create_multipart", key, true); err != nil {
		return "", err
	}
	id := rand.Text()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uploads[id] = &upload{key: key, initiated: time.Now(), parts: map[int]storage.Part{}, bodies: map[int][]byte{}}
	return id, nil
}

func (s *Store) uploadOf(op, key, id string) (*upload, error) {
	u, ok := s.uploads[id]
	if !ok || u.key != key {
		return nil, storage.NewError(op, key, storage.CodeNotFound, fmt.Errorf("no upload %q of this key", id))
	}
	return u, nil
}

func (s *Store) UploadPart(ctx context.Context, key, uploadID string, number int, body io.ReadSeeker, size int64) (storage.Part, error) {
	const op = "upload_part"
	err := cmp.Or(storage.CheckRequest(ctx, op, key, true), storage.CheckPart(key, number, size, s.limits))
	if err != nil {
		return storage.Part{}, err
	}
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return storage.Part{}, storage.NewError(op, key, storage.CodeRefused, err)
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(body, buf); err != nil {
		return storage.Part{}, storage.NewError(op, key, storage.CodeRefused, fmt.Errorf("read part body: %w", err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.uploadOf(op, key, uploadID)
	if err != nil {
		return storage.Part{}, err
	}
	p := storage.Part{Number: number, ETag: storage.ETagOf(buf), Size: size}
	u.parts[number], u.bodies[number] = p, buf
	return p, nil
}

func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []storage.Part) (storage.PutResult, error) {
	const op = "complete_multipart"
	if err := cmp.Or(storage.CheckRequest(ctx, op, key, true), storage.CheckParts(key, parts, s.limits)); err != nil {
		return storage.PutResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.uploadOf(op, key, uploadID)
	if err != nil {
		return storage.PutResult{}, err
	}
	if _, exists := s.objects[key]; exists {
		return storage.PutResult{}, storage.NewError(op, key, storage.CodePreconditionFailed, errors.New("key exists, If-None-Match *"))
	}
	var whole bytes.Buffer
	sums := md5.New()
	for _, p := range parts {
		have, ok := u.parts[p.Number]
		if !ok || have.ETag != p.ETag || have.Size != p.Size {
			return storage.PutResult{}, storage.NewError(op, key, storage.CodeRefused, fmt.Errorf("part %d is not the part uploaded", p.Number))
		}
		whole.Write(u.bodies[p.Number])
		raw, _ := hex.DecodeString(strings.Trim(p.ETag, `"`))
		sums.Write(raw)
	}
	etag := fmt.Sprintf(`"%s-%d"`, hex.EncodeToString(sums.Sum(nil)), len(parts))
	s.objects[key] = object{body: whole.Bytes(), etag: etag, modified: time.Now()}
	delete(s.uploads, uploadID)
	return storage.PutResult{ETag: etag}, nil
}

func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	if err := storage.CheckRequest(ctx, "abort_multipart", key, true); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if u, ok := s.uploads[uploadID]; ok && u.key == key {
		delete(s.uploads, uploadID)
	}
	return nil
}

func (s *Store) ListMultipart(ctx context.Context, opts storage.ListMultipartOptions) (storage.MultipartPage, error) {
	limit, err := storage.CheckList(ctx, "list_multipart", opts.Prefix, opts.Limit)
	if err != nil {
		return storage.MultipartPage{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	all := make([]storage.Upload, 0, len(s.uploads))
	for id, u := range s.uploads {
		all = append(all, storage.Upload{Key: u.key, UploadID: id, Initiated: u.initiated})
	}
	return storage.PageUploads(all, opts, limit), nil
}
