package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// TableImport is an object of the store registered in a table by reference (docs/format.md
// "Zero-copy import"), with the size and ETag a HEAD gave the client; graft never writes it.
type TableImport struct {
	Name   string `json:"name"`
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	ETag   string `json:"etag"`
	SHA256 string `json:"sha256,omitempty"`
}

// TableEdit says how a table write changes the table: by default the new version is
// exactly the write's objects and imports; with Append, the head's version plus them;
// Remove drops entries by name from the head's version.
type TableEdit struct {
	Append  bool          `json:"append,omitempty"`
	Remove  []string      `json:"remove,omitempty"`
	Imports []TableImport `json:"imports,omitempty"`
	// Staged names a staged version listing the write's objects (table_staged.go).
	Staged string `json:"staged,omitempty"`
}

func (e TableEdit) empty() bool {
	return !e.Append && len(e.Remove) == 0 && len(e.Imports) == 0 && e.Staged == ""
}

// onHead reports whether the new version edits the head's.
func (e TableEdit) onHead() bool { return e.Append || len(e.Remove) > 0 }

func (e TableEdit) check() error {
	seen := map[string]bool{}
	for i, n := range e.Remove {
		if err := format.ValidateEntryName(n); err != nil {
			return fmt.Errorf("remove[%d]: %w", i, err)
		}
		if seen[n] {
			return fmt.Errorf("remove[%d]: %s listed twice", i, n)
		}
		seen[n] = true
	}
	for i, im := range e.Imports {
		if _, err := format.ManifestMap.EncodeEntry(im.entry()); err != nil {
			return fmt.Errorf("imports[%d]: %w", i, err)
		}
		if seen[im.Name] {
			return fmt.Errorf("imports[%d]: %s is also imported or removed", i, im.Name)
		}
		seen[im.Name] = true
	}
	return nil
}

func (im TableImport) entry() format.ManifestEntry {
	return format.ManifestEntry{Name: im.Name, External: im.Key, Size: im.Size, ETag: im.ETag, SHA256: im.SHA256}
}

func (e TableEdit) digest() string {
	h := sha256.New()
	fmt.Fprintf(h, "append %v\n", e.Append)
	if e.Staged != "" {
		fmt.Fprintf(h, "staged %s\n", e.Staged)
	}
	for _, n := range e.Remove {
		fmt.Fprintf(h, "remove %s\n", n)
	}
	for _, im := range e.Imports {
		fmt.Fprintf(h, "import %s %s %d %s %s\n", im.Name, im.Key, im.Size, im.ETag, im.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// versionEntries are a write's objects (named by their ULIDs) and imports as manifest
// entries, sorted by name.
func versionEntries(entries []objectEntry, imports []TableImport) []format.ManifestEntry {
	out := make([]format.ManifestEntry, 0, len(entries)+len(imports))
	for _, e := range entries {
		out = append(out, format.ManifestEntry{Name: e.ID.String(), Object: e.ID, Size: e.Size, SHA256: e.SHA256})
	}
	for _, im := range imports {
		out = append(out, im.entry())
	}
	slices.SortFunc(out, func(a, b format.ManifestEntry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// probeImports checks every imported object is still what the client imported.
func (a *Activities) probeImports(ctx context.Context, imports []TableImport) (outcome.Outcome, string, error) {
	for _, im := range imports {
		err := graph.CheckExternal(ctx, a.Store, im.entry())
		switch {
		case errors.Is(err, storage.ErrNotFound):
			return outcome.NotFound, fmt.Sprintf("imported object %s does not exist", im.Key), nil
		case errors.Is(err, graph.ErrExternalChanged):
			return outcome.Conflict, err.Error(), nil
		case err != nil:
			return "", "", fmt.Errorf("probe imported object %s: %w", im.Key, err)
		}
	}
	return "", "", nil
}
