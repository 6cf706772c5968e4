package oracle_test

import (
	"strings"
	"testing"
	"time"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
)

// A tag naming a commit that is also an ancestor of a live head: cleanup deleting it breaks
// the tag's promise, whatever else reaches it.
func TestOracle_LiveTagNamingADeletedAncestorOfALiveHead_IsRootCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	root := f.main.Parents[0] // main's root commit: below main's head, named by the new tag
	body, err := graph.TagBytes(graph.TagParams{Graph: f.graph, Name: "v0", Commit: root.String(), Op: "tag-2",
		Time: time.Now().UTC().Truncate(time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := graph.PutTag(f.ctx, f.store, f.graph, body); err != nil {
		t.Fatal(err)
	}
	f.expect(f.config())
	f.delete(format.CommitIDKey(f.graph, root))
	vs := f.expect(f.config(), "root-commit")
	if d := detailOf(vs, "root-commit"); !strings.Contains(d, "tag v0") || !strings.Contains(d, root.String()) {
		t.Fatalf("detail %q does not name tag v0 and %s", d, root)
	}
}
