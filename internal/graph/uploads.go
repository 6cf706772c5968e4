package graph

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// UploadRecord is an upload record UploadRecords listed: where it is, and the
// data object whose multipart upload it records (docs/format.md, *Upload records*).
type UploadRecord struct {
	Key       string // the record's
	Table     string
	Object    ulid.ULID
	ObjectKey string    // the data object's key, named by the record's key
	Modified  time.Time // when the store last wrote the record
}

// UploadRecords lists graph's upload records that the store last modified
// before olderThan, by listing objects under format.UploadsPrefix: uploads are
// never listed by a prefix, which some servers cannot do. Keys there that are
// not upload record keys are left out.
func UploadRecords(ctx context.Context, s storage.Store, graph string, olderThan time.Time) ([]UploadRecord, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return nil, invalid("Graph", err)
	}
	var out []UploadRecord
	err := storage.ListAll(ctx, s, format.UploadsPrefix(graph), func(o storage.ObjectInfo) error {
		table, obj, err := format.ParseUploadKey(graph, o.Key)
		if err == nil && o.LastModified.Before(olderThan) {
			out = append(out, UploadRecord{Key: o.Key, Table: table, Object: obj,
				ObjectKey: format.ObjectKey(graph, table, obj), Modified: o.LastModified})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list upload records of graph %q: %w", graph, err)
	}
	return out, nil
}

// UploadReclaim is what ReclaimUpload found for one record and did.
type UploadReclaim struct {
	// Uploads are the record's object key's incomplete uploads started before
	// olderThan: those listed for exactly that key (the recorded one and any
	// whose create answered too late to be recorded) or, where the store cannot
	// list uploads, the recorded one unless its object exists.
	Uploads []storage.Upload
	Aborted int  // of Uploads, with abort
	Young   int  // uploads of the key started since olderThan: the record is kept
	Removed bool // the record was deleted (with abort, once nothing is left to abort)
	// Unreadable says why the record was left alone: it does not decode (another
	// format version, or not a record), or names another object than its key.
	Unreadable error
}

// ReclaimUpload reads the upload record rec and finds the incomplete uploads of
// its object key: it lists uploads with the exact object key as prefix and
// keeps those of that key alone (a server may list uploads only for one exact
// key). A store whose listing of uploads answers 501 Not Implemented has the
// recorded upload only, unless the object exists (then it completed). With
// abort, it aborts them and then deletes the record; an upload younger than
// olderThan is left with its record. A completed upload's record is deleted
// alone: the object is kept or reclaimed like any other. Only the record's own
// object key is touched, and nothing is done for a record that is gone.
func ReclaimUpload(ctx context.Context, s storage.Store, rec UploadRecord, olderThan time.Time, abort bool) (UploadReclaim, error) {
	var res UploadReclaim
	obj, err := s.Get(ctx, rec.Key)
	if errors.Is(err, storage.ErrNotFound) {
		return res, nil // another run reclaimed it
	}
	if err != nil {
		return res, fmt.Errorf("read upload record %s: %w", rec.Key, err)
	}
	up, err := format.DecodeUpload(obj.Body)
	if err == nil && up.ObjectKey != rec.ObjectKey {
		err = fmt.Errorf("upload record %s names object %s, not %s", rec.Key, up.ObjectKey, rec.ObjectKey)
	}
	if err != nil {
		res.Unreadable = err
		return res, nil
	}
	if m, ok := storage.AsMultipart(s); ok {
		ups, err := objectUploads(ctx, s, m, rec.ObjectKey, up.UploadID)
		if err != nil {
			return res, err
		}
		for _, u := range ups {
			if !u.Initiated.IsZero() && !u.Initiated.Before(olderThan) {
				res.Young++
				continue
			}
			res.Uploads = append(res.Uploads, u)
		}
		if !abort {
			return res, nil
		}
		for _, u := range res.Uploads {
			if err := m.AbortMultipart(ctx, u.Key, u.UploadID); err != nil {
				return res, fmt.Errorf("abort %s upload %s: %w", u.Key, u.UploadID, err)
			}
			res.Aborted++
		}
	}
	if !abort || res.Young > 0 {
		return res, nil
	}
	if err := s.Delete(ctx, rec.Key); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return res, fmt.Errorf("delete upload record %s: %w", rec.Key, err)
	}
	res.Removed = true
	return res, nil
}

// objectUploads lists the incomplete uploads of exactly key; where the store
// cannot list uploads, the recorded one (id), unless the object exists.
func objectUploads(ctx context.Context, s storage.Store, m storage.Multipart, key, id string) ([]storage.Upload, error) {
	var ups []storage.Upload
	err := storage.ListAllMultipart(ctx, m, key, func(u storage.Upload) error {
		if u.Key == key {
			ups = append(ups, u)
		}
		return nil
	})
	switch {
	case err == nil:
		return ups, nil
	case !listingUnsupported(err):
		return nil, fmt.Errorf("list uploads of %s: %w", key, err)
	case id == "":
		return nil, nil // never created, or created unrecorded: nothing to find
	}
	if _, err := s.Head(ctx, key); err == nil {
		return nil, nil // completed
	} else if !errors.Is(err, storage.ErrNotFound) {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return []storage.Upload{{Key: key, UploadID: id}}, nil
}

// listingUnsupported reports a listing of uploads the server does not implement.
func listingUnsupported(err error) bool {
	var se *storage.Error
	return errors.As(err, &se) && se.Status == http.StatusNotImplemented
}
