package graph

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// MaxDataObjectSize bounds one data object (64 MiB): Store.Put takes the
// whole body in memory, and a conditional PUT's failure must still come back
// as a clean 412.
const MaxDataObjectSize = 64 << 20

// ObjectInput is one data object to write: its caller-minted ULID and bytes.
type ObjectInput struct {
	ID   ulid.ULID
	Body []byte
}

// WriteTableParams are the inputs of WriteTableVersion.
type WriteTableParams struct {
	Graph     string
	Table     string
	VersionID ulid.ULID
	// Objects are the version's data objects, in any order; at most
	// format.MaxObjectsPerVersion, each at most MaxDataObjectSize bytes.
	Objects []ObjectInput
	Op      string
	Time    time.Time
}

// WriteTableVersion writes a table version: every data object, then the
// manifest listing them (sorted by ID, with size and SHA-256), each
// put-if-absent, so a manifest is never visible before its objects. The same
// bytes already at a key are fine (a re-run); other bytes are
// *KeyTakenError. Everything is validated before the first write.
func WriteTableVersion(ctx context.Context, s storage.Store, p WriteTableParams) (format.TableVersion, error) {
	v, manifest, err := buildTableVersion(p)
	if err != nil {
		return format.TableVersion{}, fmt.Errorf("write table version: %w", err)
	}
	for _, o := range p.Objects {
		key := format.ObjectKey(p.Graph, p.Table, o.ID)
		put, err := PutIfAbsent(ctx, s, key, o.Body)
		if err != nil {
			return format.TableVersion{}, fmt.Errorf("write table version %s: put object %s: %w", v.ID, o.ID, err)
		}
		if put.Outcome == PutTaken {
			return format.TableVersion{}, fmt.Errorf("write table version %s: put object %s: %w", v.ID, o.ID, &KeyTakenError{Key: key})
		}
	}
	key := format.TableVersionKey(p.Graph, p.Table, v.ID)
	put, err := PutIfAbsent(ctx, s, key, manifest)
	if err != nil {
		return format.TableVersion{}, fmt.Errorf("write table version %s: put manifest: %w", v.ID, err)
	}
	if put.Outcome == PutTaken {
		return format.TableVersion{}, fmt.Errorf("write table version %s: put manifest: %w", v.ID, &KeyTakenError{Key: key})
	}
	return v, nil
}

func buildTableVersion(p WriteTableParams) (format.TableVersion, []byte, error) {
	if err := format.ValidateGraphName(p.Graph); err != nil {
		return format.TableVersion{}, nil, invalid("Graph", err)
	}
	if err := format.ValidateTableName(p.Table); err != nil {
		return format.TableVersion{}, nil, invalid("Table", err)
	}
	if p.VersionID.IsZero() {
		return format.TableVersion{}, nil, invalidf("VersionID", "zero ULID")
	}
	if err := format.ValidateOp(p.Op); err != nil {
		return format.TableVersion{}, nil, invalid("Op", err)
	}
	if err := format.ValidateTime(p.Time); err != nil {
		return format.TableVersion{}, nil, invalid("Time", err)
	}
	if len(p.Objects) > format.MaxObjectsPerVersion {
		return format.TableVersion{}, nil, invalid("Objects", &format.TooLargeError{
			Kind: format.KindTableVersion, What: "objects", Size: int64(len(p.Objects)), Limit: int64(format.MaxObjectsPerVersion)})
	}
	v := format.TableVersion{Table: p.Table, ID: p.VersionID, CreatedAt: p.Time.UTC(), Op: p.Op}
	seen := make(map[ulid.ULID]bool, len(p.Objects))
	for i, o := range p.Objects {
		field := "Objects[" + strconv.Itoa(i) + "]"
		if o.ID.IsZero() {
			return format.TableVersion{}, nil, invalidf(field+".ID", "zero ULID")
		}
		if seen[o.ID] {
			return format.TableVersion{}, nil, invalidf(field+".ID", "%s listed twice", o.ID)
		}
		seen[o.ID] = true
		if len(o.Body) > MaxDataObjectSize {
			return format.TableVersion{}, nil, invalid(field+".Body", &ObjectTooLargeError{Object: o.ID.String(), Size: int64(len(o.Body)), Limit: MaxDataObjectSize})
		}
		sum := sha256.Sum256(o.Body)
		v.Objects = append(v.Objects, format.ObjectEntry{ID: o.ID, Size: int64(len(o.Body)), SHA256: hex.EncodeToString(sum[:])})
	}
	format.SortObjectEntries(v.Objects)
	manifest, err := format.EncodeTableVersion(v)
	if err != nil {
		return format.TableVersion{}, nil, invalidObject(err, map[string]string{"created_at": "Time"})
	}
	return v, manifest, nil
}

// ReadObjectFile reads a local file into an ObjectInput with the given ID.
// A file over MaxDataObjectSize is an *ObjectTooLargeError, found from its
// size before reading it.
func ReadObjectFile(id ulid.ULID, path string) (ObjectInput, error) {
	f, err := os.Open(path)
	if err != nil {
		return ObjectInput{}, fmt.Errorf("read object file: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return ObjectInput{}, fmt.Errorf("read object file: %w", err)
	}
	if !info.Mode().IsRegular() {
		return ObjectInput{}, fmt.Errorf("read object file: %w", invalidf("path", "%s is not a regular file", path))
	}
	if info.Size() > MaxDataObjectSize {
		return ObjectInput{}, fmt.Errorf("read object file: %w", &ObjectTooLargeError{Object: path, Size: info.Size(), Limit: MaxDataObjectSize})
	}
	body, err := io.ReadAll(io.LimitReader(f, MaxDataObjectSize+1))
	if err != nil {
		return ObjectInput{}, fmt.Errorf("read object file: %w", err)
	}
	if len(body) > MaxDataObjectSize {
		return ObjectInput{}, fmt.Errorf("read object file: %w", &ObjectTooLargeError{Object: path, Size: int64(len(body)), Limit: MaxDataObjectSize})
	}
	return ObjectInput{ID: id, Body: body}, nil
}
