package localfs

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/storagetest"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s, dir
}

func mustPut(t *testing.T, s *Store, key, body string, opts storage.PutOptions) storage.PutResult {
	t.Helper()
	res, err := s.Put(t.Context(), key, []byte(body), opts)
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return res
}

func requireCode(t *testing.T, err error, want storage.Code, what string) {
	t.Helper()
	if got := storage.CodeOf(err); err == nil || got != want {
		t.Fatalf("%s: err = %v (code %v), want code %v", what, err, got, want)
	}
}

func md5ETag(body string) string {
	sum := md5.Sum([]byte(body))
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

func TestOpen_MissingDirectory_IsCreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "store")
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("store directory after open: %v", err)
	}
	mustPut(t, s, "graph.json", "{}", storage.PutOptions{IfNoneMatch: true})
}

func TestPut_ETag_IsQuotedHexMD5OfBytes(t *testing.T) {
	s, _ := openTemp(t)
	res := mustPut(t, s, "graph.json", `{"v":1}`, storage.PutOptions{IfNoneMatch: true})
	if want := md5ETag(`{"v":1}`); res.ETag != want {
		t.Fatalf("ETag = %s, want %s", res.ETag, want)
	}
}

func TestPut_ObjectIsPlainFileAtKeyPath(t *testing.T) {
	s, dir := openTemp(t)
	mustPut(t, s, "g/refs/branches/main.json", "ref", storage.PutOptions{IfNoneMatch: true})
	body, err := os.ReadFile(filepath.Join(dir, "g", "refs", "branches", "main.json"))
	if err != nil || string(body) != "ref" {
		t.Fatalf("read object file = %q, %v; want %q", body, err, "ref")
	}
}

func TestList_StrayTempFilesFromACrash_AreNotListed(t *testing.T) {
	s, dir := openTemp(t)
	mustPut(t, s, "a/b.json", "b", storage.PutOptions{IfNoneMatch: true})
	mustPut(t, s, "c.json", "c", storage.PutOptions{IfNoneMatch: true})
	// What a crash between creating and renaming a temp file leaves behind.
	for _, stray := range []string{filepath.Join(dir, "a", tempPrefix+"0123abcd"), filepath.Join(dir, tempPrefix+"4567ef")} {
		if err := os.WriteFile(stray, []byte("half-written"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if keys := storagetest.Keys(t, s, ""); !slices.Equal(keys, []string{"a/b.json", "c.json"}) {
		t.Fatalf("keys = %q, want [a/b.json c.json]", keys)
	}
	if keys := storagetest.Keys(t, s, "a/"); !slices.Equal(keys, []string{"a/b.json"}) {
		t.Fatalf("keys under a/ = %q, want [a/b.json]", keys)
	}
	_, err := s.Get(t.Context(), "a/"+tempPrefix+"0123abcd")
	requireCode(t, err, storage.CodeNotFound, "get a temp file's name")
}

func TestPut_KeyBelowAnExistingObject_IsRefused(t *testing.T) {
	s, _ := openTemp(t)
	mustPut(t, s, "a", "file", storage.PutOptions{IfNoneMatch: true})
	_, err := s.Put(t.Context(), "a/b", []byte("x"), storage.PutOptions{IfNoneMatch: true})
	requireCode(t, err, storage.CodeRefused, "put a/b while a exists")
	_, err = s.Get(t.Context(), "a/b")
	requireCode(t, err, storage.CodeNotFound, "get a/b")
}

func TestPut_KeyThatIsADirectoryOfKeys_IsRefusedUntilTheyAreDeleted(t *testing.T) {
	s, _ := openTemp(t)
	mustPut(t, s, "a/b", "file", storage.PutOptions{IfNoneMatch: true})
	_, err := s.Put(t.Context(), "a", []byte("x"), storage.PutOptions{IfNoneMatch: true})
	requireCode(t, err, storage.CodeRefused, "put-if-absent a while a/b exists")
	_, err = s.Put(t.Context(), "a", []byte("x"), storage.PutOptions{})
	requireCode(t, err, storage.CodeRefused, "put a while a/b exists")
	_, err = s.Get(t.Context(), "a")
	requireCode(t, err, storage.CodeNotFound, "get a")
	if err := s.Delete(t.Context(), "a"); err != nil {
		t.Fatalf("delete a (a directory, not an object): %v", err)
	}
	if keys := storagetest.Keys(t, s, ""); !slices.Equal(keys, []string{"a/b"}) {
		t.Fatalf("keys = %q, want [a/b]", keys)
	}
	if err := s.Delete(t.Context(), "a/b"); err != nil {
		t.Fatalf("delete a/b: %v", err)
	}
	mustPut(t, s, "a", "now a file", storage.PutOptions{IfNoneMatch: true})
}

func TestPut_EmptyDirectoryLeftAtKey_IsReplaced(t *testing.T) {
	s, dir := openTemp(t)
	if err := os.MkdirAll(filepath.Join(dir, "k"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "k", "file", storage.PutOptions{IfNoneMatch: true})
}

func TestDelete_LastKeyOfDirectories_RemovesEmptyParentsButNotRoot(t *testing.T) {
	s, dir := openTemp(t)
	mustPut(t, s, "x/y/z/k", "1", storage.PutOptions{IfNoneMatch: true})
	mustPut(t, s, "x/other", "2", storage.PutOptions{IfNoneMatch: true})
	if err := s.Delete(t.Context(), "x/y/z/k"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x", "y")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("x/y after deleting its last key: stat err = %v, want not exist", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err != nil {
		t.Fatalf("x still holds x/other but: %v", err)
	}
	if err := s.DeleteBatch(t.Context(), []string{"x/other"}); err != nil {
		t.Fatalf("delete batch: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("x after deleting its last key: stat err = %v, want not exist", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("store root removed: %v", err)
	}
	mustPut(t, s, "x/y/again", "3", storage.PutOptions{IfNoneMatch: true})
}

func TestPut_ReservedSegment_IsRefusedAndStoreFilesAreUntouched(t *testing.T) {
	s, dir := openTemp(t)
	mustPut(t, s, "k", "v", storage.PutOptions{IfNoneMatch: true}) // creates a lock file
	locks, err := os.ReadDir(filepath.Join(dir, lockDirName))
	if err != nil || len(locks) == 0 {
		t.Fatalf("lock files after a put: %d, %v", len(locks), err)
	}
	lockKey := lockDirName + "/" + locks[0].Name()
	for _, key := range []string{lockKey, "a/" + tempPrefix + "x", ".graft-anything"} {
		_, err := s.Put(t.Context(), key, []byte("x"), storage.PutOptions{})
		requireCode(t, err, storage.CodeRefused, "put "+key)
		_, err = s.Head(t.Context(), key)
		requireCode(t, err, storage.CodeNotFound, "head "+key)
		if err := s.Delete(t.Context(), key); err != nil {
			t.Fatalf("delete %s: %v", key, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(lockKey))); err != nil {
		t.Fatalf("lock file after delete of its name: %v", err)
	}
}

func TestList_NarrowPrefix_ReadsOnlyDirectoriesOnItsPath(t *testing.T) {
	s, dir := openTemp(t)
	for _, key := range []string{
		"g/tables/t1/objects/01", "g/tables/t1/objects/02", "g/tables/t2/versions/01.json",
		"g/trees/main.01/commits/0001.json", "g/trees/mainline.02/commits/0001.json", "g/trees/other.03/commits/0001.json",
		"g/refs/branches/main.01.json",
	} {
		mustPut(t, s, key, key, storage.PutOptions{IfNoneMatch: true})
	}
	var visited []string
	readDir = func(name string) ([]os.DirEntry, error) {
		rel, _ := filepath.Rel(dir, name)
		visited = append(visited, filepath.ToSlash(rel))
		return os.ReadDir(name)
	}
	t.Cleanup(func() { readDir = os.ReadDir })

	if keys := storagetest.Keys(t, s, "g/refs/branches/"); !slices.Equal(keys, []string{"g/refs/branches/main.01.json"}) {
		t.Fatalf("keys = %q", keys)
	}
	if want := []string{"g/refs/branches"}; !slices.Equal(visited, want) {
		t.Fatalf("visited %q, want %q", visited, want)
	}
	visited = nil
	if keys := storagetest.Keys(t, s, "g/trees/main"); !slices.Equal(keys, []string{"g/trees/main.01/commits/0001.json", "g/trees/mainline.02/commits/0001.json"}) {
		t.Fatalf("keys = %q", keys)
	}
	want := []string{"g/trees", "g/trees/main.01", "g/trees/main.01/commits", "g/trees/mainline.02", "g/trees/mainline.02/commits"}
	if !slices.Equal(visited, want) {
		t.Fatalf("visited %q, want %q", visited, want)
	}
}

func TestList_PagingOneKeyAtATime_FollowsByteOrderThroughSubdirectories(t *testing.T) {
	s, _ := openTemp(t)
	keys := []string{"x/ab", "x/a0", "x/a/c/d", "x/a/b", "x/a.b", "x/a-b", "x/a/c-d", "x/a/c.d", "x!", "y"}
	for _, key := range keys {
		mustPut(t, s, key, key, storage.PutOptions{IfNoneMatch: true})
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	var got []string
	after := ""
	for {
		page, err := s.List(t.Context(), storage.ListOptions{StartAfter: after, Limit: 1})
		if err != nil {
			t.Fatalf("list after %q: %v", after, err)
		}
		for _, o := range page.Objects {
			got = append(got, o.Key)
		}
		if !page.Truncated {
			break
		}
		after = page.Objects[0].Key
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged keys = %q, want %q", got, want)
	}
	// StartAfter that is no key, inside and beside a subdirectory.
	for _, tc := range []struct{ after, first string }{{"x/a/c", "x/a/c-d"}, {"x/a/c/", "x/a/c/d"}, {"x/a.", "x/a.b"}, {"x/a/", "x/a/b"}, {"x/a/zz", "x/a0"}} {
		page, err := s.List(t.Context(), storage.ListOptions{StartAfter: tc.after, Limit: 1})
		if err != nil || len(page.Objects) != 1 || page.Objects[0].Key != tc.first {
			t.Fatalf("first key after %q = %+v, %v; want %q", tc.after, page.Objects, err, tc.first)
		}
	}
}

func TestList_PrefixThatNoValidKeyHas_IsEmpty(t *testing.T) {
	s, _ := openTemp(t)
	mustPut(t, s, "a/b", "x", storage.PutOptions{IfNoneMatch: true})
	for _, prefix := range []string{"../", "a/../a/", "/a/", "a//", lockDirName + "/", "a/./"} {
		if keys := storagetest.Keys(t, s, prefix); len(keys) != 0 {
			t.Fatalf("keys under %q = %q, want none", prefix, keys)
		}
	}
}

func TestList_LimitOutOfRange_IsInvalidArgument(t *testing.T) {
	s, _ := openTemp(t)
	for _, limit := range []int{-1, 1001} {
		_, err := s.List(t.Context(), storage.ListOptions{Limit: limit})
		requireCode(t, err, storage.CodeInvalidArgument, fmt.Sprintf("list with limit %d", limit))
	}
}

func TestPut_CancelledContext_WritesNothing(t *testing.T) {
	s, dir := openTemp(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Put(ctx, "d/k", []byte("x"), storage.PutOptions{IfNoneMatch: true})
	requireCode(t, err, storage.CodeAmbiguous, "put with a cancelled context")
	if _, err := os.Stat(filepath.Join(dir, "d")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a cancelled put touched the disk: stat d = %v", err)
	}
}

func TestHead_FileRewrittenByOperator_ETagFollowsTheBytes(t *testing.T) {
	s, dir := openTemp(t)
	path := filepath.Join(dir, "k.json")
	if err := os.WriteFile(path, []byte("written by hand"), 0o644); err != nil {
		t.Fatal(err)
	}
	head, err := s.Head(t.Context(), "k.json")
	if err != nil || head.ETag != md5ETag("written by hand") || head.Size != int64(len("written by hand")) {
		t.Fatalf("head of a hand-written file = %+v, %v; want ETag %s", head, err, md5ETag("written by hand"))
	}
	mustPut(t, s, "k.json", "written by the store", storage.PutOptions{IfMatch: head.ETag})
	if err := os.WriteFile(path, []byte("edited in place"), 0o644); err != nil {
		t.Fatal(err)
	}
	head, err = s.Head(t.Context(), "k.json")
	if err != nil || head.ETag != md5ETag("edited in place") {
		t.Fatalf("head after an in-place edit = %+v, %v; want ETag %s", head, err, md5ETag("edited in place"))
	}
	page, err := s.List(t.Context(), storage.ListOptions{})
	if err != nil || len(page.Objects) != 1 || page.Objects[0].ETag != md5ETag("edited in place") {
		t.Fatalf("list after an in-place edit = %+v, %v", page.Objects, err)
	}
}

func TestPutIfMatch_BytesChangedBehindTheETagCache_ComparesTheRealBytes(t *testing.T) {
	s, dir := openTemp(t)
	put := mustPut(t, s, "k", "aaaa", storage.PutOptions{IfNoneMatch: true})
	path := filepath.Join(dir, "k")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// Same size, same mtime: a cached ETag would still look valid.
	if err := os.WriteFile(path, []byte("bbbb"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	_, err = s.Put(t.Context(), "k", []byte("cccc"), storage.PutOptions{IfMatch: put.ETag})
	requireCode(t, err, storage.CodePreconditionFailed, "put-if-match with the ETag of bytes no longer there")
	mustPut(t, s, "k", "cccc", storage.PutOptions{IfMatch: md5ETag("bbbb")})
}

func TestPutAndDelete_RacingInOneDirectory_PutsNeverFail(t *testing.T) {
	s, _ := openTemp(t)
	const goroutines, rounds = 4, 50
	errs := make(chan error, goroutines*rounds*2)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				key := fmt.Sprintf("hot/deep/dir/k%d-%d", g, i)
				if _, err := s.Put(t.Context(), key, []byte("x"), storage.PutOptions{IfNoneMatch: true}); err != nil {
					errs <- fmt.Errorf("put %s: %w", key, err)
				}
				if err := s.Delete(t.Context(), key); err != nil {
					errs <- fmt.Errorf("delete %s: %w", key, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if keys := storagetest.Keys(t, s, ""); len(keys) != 0 {
		t.Fatalf("keys left = %q", keys)
	}
}

func TestDeleteBatch_InvalidKeyAmongValid_DeletesNothing(t *testing.T) {
	s, _ := openTemp(t)
	mustPut(t, s, "a", "x", storage.PutOptions{IfNoneMatch: true})
	err := s.DeleteBatch(t.Context(), []string{"a", "b//c"})
	requireCode(t, err, storage.CodeInvalidKey, "delete batch with an invalid key")
	if _, err := s.Head(t.Context(), "a"); err != nil {
		t.Fatalf("head a after a rejected batch: %v", err)
	}
}

func TestGet_SegmentLongerThanTheFileSystemAllows_IsNotFoundAndPutIsRefused(t *testing.T) {
	s, _ := openTemp(t)
	key := "d/" + strings.Repeat("n", 300)
	_, err := s.Get(t.Context(), key)
	requireCode(t, err, storage.CodeNotFound, "get")
	_, err = s.Put(t.Context(), key, []byte("x"), storage.PutOptions{IfNoneMatch: true})
	requireCode(t, err, storage.CodeRefused, "put")
}
