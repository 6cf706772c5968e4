package graph

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// Tags: immutable, graph-wide names for commits, written once put-if-absent. Deleting
// one swaps in a retired tag keeping the key, so a late put never lands and the name
// is never reused.

// ErrTagNotFound reports a tag name with no tag object.
var ErrTagNotFound = errors.New("graph: tag not found")

// TagParams are the inputs of TagBytes; Commit is the tagged commit's id.
type TagParams struct {
	Graph, Name string
	Commit      string
	Op          string
	Time        time.Time
}

// TagBytes returns the exact bytes of the live tag p describes.
func TagBytes(p TagParams) ([]byte, error) {
	if err := checkParams(param{"Graph", format.ValidateGraphName(p.Graph)},
		param{"Name", format.ValidateTagName(p.Name)}); err != nil {
		return nil, err
	}
	id, err := format.ParseCommitID(p.Commit)
	if err != nil {
		return nil, invalid("Commit", err)
	}
	b, err := format.EncodeTag(format.Tag{State: format.TagLive, Name: p.Name, Commit: id, Op: p.Op, CreatedAt: p.Time.UTC()})
	if err != nil {
		return nil, invalidObject(err, map[string]string{"op": "Op", "created_at": "Time"})
	}
	return b, nil
}

// TagPutOutcome says how a PutTag settled.
type TagPutOutcome string

const (
	TagCreated TagPutOutcome = "created" // this call's put (or an earlier one of the same bytes) made the tag
	TagExists  TagPutOutcome = "exists"  // a live tag of another operation names the same commit (success)
	TagTaken   TagPutOutcome = "taken"   // the name holds a live tag of another commit, or a retired tag
)

// TagPutResult is how a PutTag settled, and the tag now at the key.
type TagPutResult struct {
	Outcome TagPutOutcome
	Tag     format.Tag
}

// PutTag writes a live tag body (TagBytes) put-if-absent, settled by read-back
// (TagPutOutcome); still unknown is an *InDoubtError: call again with the same body.
func PutTag(ctx context.Context, s storage.Store, graph string, body []byte) (TagPutResult, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return TagPutResult{}, fmt.Errorf("put tag: %w", invalid("Graph", err))
	}
	want, err := format.DecodeTag(body)
	if err != nil {
		return TagPutResult{}, fmt.Errorf("put tag: %w", invalid("Body", err))
	}
	if want.State != format.TagLive {
		return TagPutResult{}, fmt.Errorf("put tag: %w", invalidf("Body", "a %s tag, not a live one", want.State))
	}
	key := format.TagKey(graph, want.Name)
	put, err := PutIfAbsent(ctx, s, key, body)
	if err != nil {
		return TagPutResult{}, fmt.Errorf("put tag %s: %w", want.Name, err)
	}
	if put.Outcome != PutTaken {
		return TagPutResult{Outcome: TagCreated, Tag: want}, nil
	}
	have, err := decodeTagAt(key, want.Name, put.Existing)
	if err != nil {
		return TagPutResult{}, fmt.Errorf("put tag %s: %w", want.Name, err)
	}
	if have.State == format.TagLive && have.Commit == want.Commit {
		return TagPutResult{Outcome: TagExists, Tag: have}, nil
	}
	return TagPutResult{Outcome: TagTaken, Tag: have}, nil
}

// TagEntry is a tag read from storage, with its ETag for RetireTag.
type TagEntry struct {
	Tag  format.Tag
	ETag string
}

// ReadTag reads one tag, live or retired: one GET. A missing tag is ErrTagNotFound.
func ReadTag(ctx context.Context, s storage.Store, graph, name string) (TagEntry, error) {
	if err := checkParams(param{"Graph", format.ValidateGraphName(graph)}, param{"Name", format.ValidateTagName(name)}); err != nil {
		return TagEntry{}, err
	}
	key := format.TagKey(graph, name)
	obj, err := s.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return TagEntry{}, fmt.Errorf("read tag %q: %w: %w", name, ErrTagNotFound, err)
	}
	if err != nil {
		return TagEntry{}, fmt.Errorf("read tag %q: %w", name, err)
	}
	t, err := decodeTagAt(key, name, obj.Body)
	if err != nil {
		return TagEntry{}, fmt.Errorf("read tag %q: %w", name, err)
	}
	return TagEntry{Tag: t, ETag: obj.ETag}, nil
}

// ListTags reads every tag of graph, any state, by name (parallel GETs).
func ListTags(ctx context.Context, s storage.Store, graph string) ([]TagEntry, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return nil, invalid("Graph", err)
	}
	keys, names, err := listKeys(ctx, s, format.TagsPrefix(graph), func(key string) (string, error) {
		return format.ParseTagKey(graph, key)
	})
	if err != nil {
		return nil, fmt.Errorf("list tags of graph %q: %w", graph, err)
	}
	out := make([]TagEntry, 0, len(keys))
	err = getEach(ctx, s, keys, "tag", func(i int, obj storage.Object) error {
		t, err := decodeTagAt(keys[i], names[i], obj.Body)
		out = append(out, TagEntry{Tag: t, ETag: obj.ETag})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list tags of graph %q: %w", graph, err)
	}
	return out, nil
}

// decodeTagAt strictly decodes the tag at key and checks it is the one the key names.
func decodeTagAt(key, name string, body []byte) (format.Tag, error) {
	t, err := format.DecodeTag(body)
	if err == nil {
		err = misnamed(t.Name != name, format.KindTag, "name", "is "+t.Name+", not the tag its key names")
	}
	if err != nil {
		return format.Tag{}, fmt.Errorf("%s: %w", key, err)
	}
	return t, nil
}

// ErrTagChanged reports a tag a compare-and-swap expected that changed.
var ErrTagChanged = errors.New("graph: tag changed")

// TagChangedError reports a tag without the caller's ETag; it matches ErrTagChanged.
type TagChangedError struct {
	Key   string
	ETag  string
	Found format.TagState // its state now ("" when the key is empty)
	Op    string          // the operation that retired it
}

func (e *TagChangedError) Error() string {
	if e.Found == "" {
		return fmt.Sprintf("graph: tag %s is gone (expected ETag %s)", e.Key, e.ETag)
	}
	return fmt.Sprintf("graph: tag %s changed: it is now %s by operation %s", e.Key, e.Found, e.Op)
}

// Is matches ErrTagChanged.
func (e *TagChangedError) Is(target error) bool { return target == ErrTagChanged }

// RetireTag swaps the live tag name, which must still have ETag etag, for a
// retired tag naming retiredOp, as RetireRef does for refs (call again to settle).
func RetireTag(ctx context.Context, s storage.Store, graph, name, etag, retiredOp string) (PutOutcome, error) {
	if err := checkParams(param{"Graph", format.ValidateGraphName(graph)}, param{"Name", format.ValidateTagName(name)},
		param{"ETag", nonEmpty(etag)}, param{"RetiredOp", format.ValidateOp(retiredOp)}); err != nil {
		return 0, fmt.Errorf("retire tag: %w", err)
	}
	key := format.TagKey(graph, name)
	outcome, _, err := retire(ctx, s, "tag", key, etag, &TagChangedError{Key: key, ETag: etag}, func(obj storage.Object) ([]byte, bool, error) {
		t, err := decodeTagAt(key, name, obj.Body)
		switch {
		case err != nil:
			return nil, false, err
		case obj.ETag != etag && t.State == format.TagRetired && t.RetiredOp == retiredOp:
			return nil, true, nil
		case obj.ETag != etag:
			return nil, false, &TagChangedError{Key: key, ETag: etag, Found: t.State, Op: t.RetiredOp}
		case t.State != format.TagLive:
			return nil, false, invalidf("ETag", "names a %s tag, not a live one", t.State)
		}
		t.State, t.RetiredOp = format.TagRetired, retiredOp
		body, _ := format.EncodeTag(t) // a valid live tag with a checked op encodes
		return body, false, nil
	})
	if err != nil {
		return 0, fmt.Errorf("retire tag %s: %w", name, err)
	}
	return outcome, nil
}
