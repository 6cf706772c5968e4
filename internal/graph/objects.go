package graph

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// Upload defaults: objects over the threshold go in parts of DefaultPartSize
// (raised to stay within the backend's parts), so many in flight and in memory.
const (
	DefaultMultipartThreshold = 64 << 20
	DefaultPartSize           = 64 << 20
	DefaultUploadConcurrency  = 4
	abortTimeout              = 30 * time.Second // bounds the abort of a failed upload
)

// MaxDataObjectSize bounds a one-put object: Put holds it in memory.
const MaxDataObjectSize = 64 << 20

// UploadOptions tune UploadObject. The zero value uses the defaults.
type UploadOptions struct {
	Threshold   int64 // the largest one-put object (at most MaxDataObjectSize)
	PartSize    int64 // the size of every part but the last (see PartSizeFor)
	Concurrency int   // the parts in flight
}

// ErrMultipartUnsupported reports a large object on a store without multipart.
var ErrMultipartUnsupported = errors.New("graph: the store has no multipart uploads")

// UploadResult is what UploadObject stored: the object's entry, named by its
// ULID, and its parts and multipart upload (0 and "" for a single put).
type UploadResult struct {
	Entry    format.ManifestEntry
	Parts    int
	UploadID string
}

// UploadObject writes size bytes from r as data object id of table, hashing
// them: up to the threshold one PutIfAbsent (other bytes: *KeyTakenError), above
// it a multipart upload, parts retried on an unknown outcome and the complete
// settled by HEAD (the size tells). A multipart upload is recorded at UploadKey
// before it is created and the record names its id before the first part is
// sent, so cleanup finds it by listing objects (UploadRecords, ReclaimUpload);
// a record that cannot be written fails the upload before it is created. A
// failure aborts the upload; what a crash leaves, cleanup aborts. The record
// stays either way: only cleanup deletes it.
func UploadObject(ctx context.Context, s storage.Store, graph, table string, id ulid.ULID, r io.Reader, size int64, opts UploadOptions) (UploadResult, error) {
	if err := checkParams(param{"Graph", format.ValidateGraphName(graph)},
		param{"Table", format.ValidateTableName(table)}, param{"ID", nonZero(id)}); err != nil {
		return UploadResult{}, err
	}
	if size < 0 || size > storage.MaxObjectSize {
		return UploadResult{}, invalid("Size", &ObjectTooLargeError{Object: id.String(), Size: size, Limit: storage.MaxObjectSize})
	}
	threshold := opts.Threshold
	if threshold <= 0 || threshold > MaxDataObjectSize {
		threshold = min(DefaultMultipartThreshold, MaxDataObjectSize)
	}
	key := format.ObjectKey(graph, table, id)
	entry := format.ManifestEntry{Name: id.String(), Object: id, Size: size}
	m, hasMultipart := storage.AsMultipart(s)
	if size <= threshold || !hasMultipart && size <= MaxDataObjectSize {
		body := make([]byte, size)
		if _, err := io.ReadFull(r, body); err != nil {
			return UploadResult{}, fmt.Errorf("upload object %s: read: %w", id, err)
		}
		sum := sha256.Sum256(body)
		entry.SHA256 = hex.EncodeToString(sum[:])
		if err := putNew(ctx, s, key, body, false); err != nil {
			return UploadResult{}, fmt.Errorf("upload object %s: %w", id, err)
		}
		return UploadResult{Entry: entry}, nil
	}
	if !hasMultipart {
		return UploadResult{}, fmt.Errorf("upload object %s of %d bytes: %w", id, size, ErrMultipartUnsupported)
	}
	u := &uploader{s: s, m: m, key: key, record: format.UploadKey(graph, table, id), size: size, opts: opts}
	sum, parts, err := u.run(ctx, r)
	if err != nil {
		return UploadResult{}, fmt.Errorf("upload object %s: %w", id, err)
	}
	entry.SHA256 = sum
	return UploadResult{Entry: entry, Parts: parts, UploadID: u.id}, nil
}

// PartSizeFor returns UploadObject's part size for size bytes: the requested (or
// default) size, at least MinPartSize and size/MaxParts rounded up to a MiB, at
// most MaxPartSize.
func PartSizeFor(size, requested int64, limits storage.MultipartLimits) int64 {
	ps := requested
	if ps <= 0 {
		ps = DefaultPartSize
	}
	ps = max(ps, limits.MinPartSize, 1)
	if limits.MaxParts > 0 {
		if need := (size + int64(limits.MaxParts) - 1) / int64(limits.MaxParts); need > ps {
			ps = (need + (1<<20 - 1)) &^ (1<<20 - 1)
		}
	}
	if limits.MaxPartSize > 0 {
		ps = min(ps, limits.MaxPartSize)
	}
	return ps
}

type uploader struct {
	s      storage.Store
	m      storage.Multipart
	key    string // the object's
	record string // the upload record's
	size   int64
	opts   UploadOptions
	id     string // the upload's, once created
}

func (u *uploader) run(ctx context.Context, r io.Reader) (string, int, error) {
	limits := u.m.MultipartLimits()
	partSize := PartSizeFor(u.size, u.opts.PartSize, limits)
	nparts := max(1, int((u.size+partSize-1)/partSize))
	if limits.MaxParts > 0 && nparts > limits.MaxParts {
		return "", 0, fmt.Errorf("%d parts needed, the store allows %d", nparts, limits.MaxParts)
	}
	// The record exists before the upload does; its time is for people (cleanup
	// goes by the store's last-modified time).
	rec := format.Upload{ObjectKey: u.key, CreatedAt: time.Now().UTC()}
	first, err := format.EncodeUpload(rec)
	if err != nil {
		return "", 0, fmt.Errorf("encode upload record: %w", err)
	}
	put, err := PutIfAbsent(ctx, u.s, u.record, first)
	switch {
	case err != nil:
		return "", 0, fmt.Errorf("write upload record: %w", err)
	case put.Outcome == PutTaken: // the key is this object's own ULID: another upload of it
		return "", 0, fmt.Errorf("write upload record: %w", &KeyTakenError{Key: u.record})
	}
	// An ambiguous create may leave an upload whose id never reached us: cleanup
	// lists the object key's uploads (ReclaimUpload).
	id, err := retried(ctx, func() (string, error) { return u.m.CreateMultipart(ctx, u.key) })
	if err != nil {
		return "", 0, fmt.Errorf("create multipart upload: %w", err)
	}
	u.id = id
	rec.UploadID = id
	next, err := format.EncodeUpload(rec)
	if err == nil {
		err = swapOwn(ctx, u.s, u.record, put.ETag, first, next)
	}
	var sum string
	var parts []storage.Part
	if err != nil {
		err = fmt.Errorf("record upload %s: %w", id, err)
	} else if sum, parts, err = u.sendParts(ctx, r, partSize, nparts); err == nil {
		err = u.complete(ctx, parts)
	}
	if err != nil {
		if aerr := u.abort(ctx); aerr != nil {
			err = fmt.Errorf("%w (and abort upload %s: %v)", err, u.id, aerr)
		}
		return "", 0, err
	}
	return sum, nparts, nil
}

// abort aborts the upload, again while listed (in-flight parts revive it).
func (u *uploader) abort(ctx context.Context) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	var err error
	for attempt := 0; attempt < MaxPutAttempts; attempt++ {
		if err = u.m.AbortMultipart(actx, u.key, u.id); err != nil {
			continue
		}
		page, lerr := u.m.ListMultipart(actx, storage.ListMultipartOptions{Prefix: u.key})
		if lerr != nil {
			return nil // aborted; whether a straggler revived it is cleanup's to find
		}
		if !slices.ContainsFunc(page.Uploads, func(up storage.Upload) bool { return up.UploadID == u.id }) {
			return nil
		}
	}
	return err
}

// swapOwn replaces our bytes at key, whose ETag is etag ("" when unknown), with
// next by compare-and-swap. An unsettled answer is settled by reading back: next
// there is done, ours there is swapped again, anything else is an error.
func swapOwn(ctx context.Context, s storage.Store, key, etag string, ours, next []byte) error {
	s = reissue(s)
	var last error
	attempt := 1
	for ; attempt <= MaxPutAttempts; attempt++ {
		if etag == "" {
			obj, err := s.Get(ctx, key)
			switch {
			case err != nil:
				return fmt.Errorf("read %s back: %w", key, errors.Join(err, last))
			case bytes.Equal(obj.Body, next):
				return nil
			case !bytes.Equal(obj.Body, ours):
				return fmt.Errorf("%s holds neither our bytes nor their replacement", key)
			}
			etag = obj.ETag
		}
		_, err := s.Put(ctx, key, next, storage.PutOptions{IfMatch: etag})
		if err == nil || !unsettled(err) {
			return err
		}
		last, etag = err, ""
		if ctx.Err() != nil {
			break
		}
	}
	return &InDoubtError{Key: key, Body: next, Attempts: min(attempt, MaxPutAttempts), Err: last}
}

// retried calls fn, at most MaxPutAttempts times while it fails retryably.
func retried[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := fn()
		if err == nil || attempt == MaxPutAttempts || !retryable(err) || ctx.Err() != nil {
			return v, err
		}
	}
}

func retryable(err error) bool {
	code := storage.CodeOf(err)
	return code == storage.CodeAmbiguous || code == storage.CodeUnavailable || code == storage.CodeUnknown
}

// sendParts reads, hashes and uploads the parts in order, Concurrency in flight
// (and in memory); after a failure it reads no more and awaits the parts in
// flight, which could outlive the abort.
func (u *uploader) sendParts(ctx context.Context, r io.Reader, partSize int64, nparts int) (string, []storage.Part, error) {
	workers := u.opts.Concurrency
	if workers <= 0 {
		workers = DefaultUploadConcurrency
	}
	h := sha256.New()
	parts := make([]storage.Part, nparts)
	errs := make([]error, nparts)
	sem := make(chan struct{}, workers)
	var (
		wg      sync.WaitGroup
		failed  atomic.Bool
		readErr error
	)
	for n := 1; n <= nparts && !failed.Load() && ctx.Err() == nil; n++ {
		body := make([]byte, min(partSize, u.size-int64(n-1)*partSize))
		if _, err := io.ReadFull(r, body); err != nil {
			readErr = fmt.Errorf("read part %d: %w", n, err)
			break
		}
		h.Write(body)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if failed.Load() || ctx.Err() != nil {
				return
			}
			parts[n-1], errs[n-1] = retried(ctx, func() (storage.Part, error) {
				return u.m.UploadPart(ctx, u.key, u.id, n, bytes.NewReader(body), int64(len(body)))
			})
			if errs[n-1] != nil {
				errs[n-1] = fmt.Errorf("upload part %d: %w", n, errs[n-1])
				failed.Store(true)
			}
		})
	}
	wg.Wait()
	if err := cmp.Or(readErr, cmp.Or(errs...), ctx.Err()); err != nil {
		return "", nil, err
	}
	return hex.EncodeToString(h.Sum(nil)), parts, nil
}

// complete finishes the upload; an unknown answer is settled by HEAD.
func (u *uploader) complete(ctx context.Context, parts []storage.Part) error {
	var last error
	for attempt := 1; attempt <= MaxPutAttempts; attempt++ {
		_, err := u.m.CompleteMultipart(ctx, u.key, u.id, parts)
		if err == nil {
			return u.confirm(ctx)
		}
		last = err
		code := storage.CodeOf(err)
		if !unsettled(err) && code != storage.CodeNotFound {
			return fmt.Errorf("complete upload: %w", err)
		}
		info, herr := u.s.Head(ctx, u.key)
		switch {
		case herr == nil && info.Size == u.size: // ours landed (the key is this object's own ULID)
			return nil
		case herr == nil:
			return fmt.Errorf("complete upload: %w", &KeyTakenError{Key: u.key})
		case code == storage.CodeNotFound && errors.Is(herr, storage.ErrNotFound):
			return fmt.Errorf("complete upload: the upload is gone and the object absent: %w", err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("complete upload: %w", last)
}

// confirmReads bounds confirm's reads; the pause between them doubles.
const (
	confirmReads = 8
	confirmPause = 50 * time.Millisecond
)

// confirm reads the completed object back, as a backend (versitygw, for big
// objects) may answer a complete before the object is visible: our size is done,
// another size another writer's; still absent is ErrAmbiguous, for the caller to settle.
func (u *uploader) confirm(ctx context.Context) error {
	pause := confirmPause
	var last error
	for read := 1; read <= confirmReads; read++ {
		info, err := u.s.Head(ctx, u.key)
		switch {
		case err == nil && info.Size == u.size:
			return nil
		case err == nil:
			return fmt.Errorf("complete upload: %w", &KeyTakenError{Key: u.key})
		case !errors.Is(err, storage.ErrNotFound) && !retryable(err):
			return fmt.Errorf("complete upload: read back %s: %w", u.key, err)
		}
		last = err
		if read == confirmReads {
			break
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("complete upload: read back %s: %w (%w)", u.key, storage.ErrAmbiguous, ctx.Err())
		case <-t.C:
		}
		pause *= 2
	}
	return fmt.Errorf("complete upload: answered done, yet %s is not readable after %d reads (last: %v): %w",
		u.key, confirmReads, last, storage.ErrAmbiguous)
}

// ObjectProblem is an object a table version names that is not what its entry says.
type ObjectProblem struct {
	Index   int // the object's position in the refs given to VerifyObjects
	Ref     ObjectRef
	Missing bool // nothing at the key; otherwise Reason says how the object differs
	Reason  string
}

// VerifyObjects HEADs every object refs name, in parallel, and returns the
// missing or changed ones in refs' order; progress, if set, gets the count
// checked so far, from several goroutines.
func VerifyObjects(ctx context.Context, s storage.Store, refs []ObjectRef, progress func(done int64)) ([]ObjectProblem, error) {
	problems := make([]*ObjectProblem, len(refs))
	errs := make([]error, len(refs))
	var done atomic.Int64
	bounded.Each(len(refs), parallelism, func(i int) {
		ref := refs[i]
		if ctx.Err() != nil {
			return
		}
		info, err := s.Head(ctx, ref.Key)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			problems[i] = &ObjectProblem{Index: i, Ref: ref, Missing: true, Reason: "missing"}
		case err != nil:
			errs[i] = fmt.Errorf("verify %s: %w", ref.Key, err)
		case info.Size != ref.Size:
			problems[i] = &ObjectProblem{Index: i, Ref: ref, Reason: fmt.Sprintf("%d bytes, the entry says %d", info.Size, ref.Size)}
		case ref.ETag != "" && info.ETag != ref.ETag:
			problems[i] = &ObjectProblem{Index: i, Ref: ref, Reason: fmt.Sprintf("ETag %s, imported as %s", info.ETag, ref.ETag)}
		}
		if n := done.Add(1); progress != nil {
			progress(n)
		}
	})
	if err := cmp.Or(ctx.Err(), errors.Join(errs...)); err != nil {
		return nil, err
	}
	var out []ObjectProblem
	for _, p := range problems {
		if p != nil {
			out = append(out, *p)
		}
	}
	return out, nil
}
