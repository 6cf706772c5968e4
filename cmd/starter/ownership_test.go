package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/localfs"
	"github.com/graftworks/graft/storage/s3"
	"github.com/graftworks/graft/workflows"
)

// A graph owns its whole prefix, and only its prefix (docs/format.md, *Ownership*): the
// two ways a graph used to name or reclaim what another graph or tool owned, tried as a
// user would, on the local store and on versitygw.

// ownerStack is the built graft binary against a worker in this process, on one
// backend, with helpers to look at its bucket as another tool would.
type ownerStack struct {
	*inProcess
	t   *testing.T
	bin string
	dir string
	// suffix makes graph names unique to the test: the workflow ids of the subtests
	// running at once on one Temporal server are derived from them.
	suffix string
}

// eachBackendCLI runs fn on a fresh stack over the local store and over versitygw.
func eachBackendCLI(t *testing.T, fn func(t *testing.T, p *ownerStack)) {
	t.Helper()
	bin := buildGraft(t)
	for _, backend := range []string{"localfs", "versitygw"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			var inner storage.Store
			var env map[string]string
			if backend == "localfs" {
				dir := t.TempDir()
				st, err := localfs.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				inner, env = st, map[string]string{"GRAFT_STORE_DIR": dir}
			} else {
				srv := testenv.VersityGW(t)
				cfg := s3.Config{Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.NewBucket(t), PathStyle: true,
					AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}
				st, err := s3.New(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				inner, env = st, map[string]string{
					"GRAFT_S3_ENDPOINT": cfg.Endpoint, "GRAFT_S3_BUCKET": cfg.Bucket, "GRAFT_S3_PATH_STYLE": "true",
					"GRAFT_S3_REGION": cfg.Region, "AWS_ACCESS_KEY_ID": cfg.AccessKeyID, "AWS_SECRET_ACCESS_KEY": cfg.SecretAccessKey,
				}
			}
			fn(t, &ownerStack{inProcess: newInProcessOn(t, inner, env), t: t, bin: bin, dir: t.TempDir(),
				suffix: strings.ToLower(ulid.Make().String()[20:])})
		})
	}
}

// run runs the graft binary with the stack's settings.
func (p *ownerStack) run(args ...string) result {
	p.t.Helper()
	var env []string
	for k, v := range p.env {
		env = append(env, k+"="+v)
	}
	return runGraft(p.t, p.bin, env, args...)
}

// name is the graph name base, unique to this test.
func (p *ownerStack) name(base string) string { return base + "-" + p.suffix }

// file writes a local file to upload.
func (p *ownerStack) file(name, body string) string {
	p.t.Helper()
	f := filepath.Join(p.dir, name)
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		p.t.Fatal(err)
	}
	return f
}

// put writes key as another tool would.
func (p *ownerStack) put(key, body string) {
	p.t.Helper()
	if _, err := p.store.Inner().Put(context.Background(), key, []byte(body), storage.PutOptions{}); err != nil {
		p.t.Fatalf("put %s: %v", key, err)
	}
}

func (p *ownerStack) del(key string) {
	p.t.Helper()
	if err := p.store.Inner().Delete(context.Background(), key); err != nil {
		p.t.Fatalf("delete %s: %v", key, err)
	}
}

// bucket lists every key with its ETag.
func (p *ownerStack) bucket() map[string]string {
	p.t.Helper()
	out := map[string]string{}
	err := storage.ListAll(context.Background(), p.store.Inner(), "", func(o storage.ObjectInfo) error {
		out[o.Key] = o.ETag
		return nil
	})
	if err != nil {
		p.t.Fatal(err)
	}
	return out
}

func (p *ownerStack) exists(key string) bool {
	p.t.Helper()
	_, err := p.store.Inner().Head(context.Background(), key)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		p.t.Fatalf("head %s: %v", key, err)
	}
	return err == nil
}

// objectKeys lists the keys table objects names.
func (p *ownerStack) objectKeys(graph, ref, table string) []string {
	p.t.Helper()
	r := p.run("table", "objects", graph, ref, table, "-o", "json")
	wantCode(p.t, r, 0)
	var keys []string
	for _, o := range jsonOut[client.TableListing](p.t, r).Objects {
		keys = append(keys, o.Key)
	}
	return keys
}

// oldULID is a ULID minted long before any graph of a test exists: a key another tool
// wrote before the graph.
func oldULID() ulid.ULID {
	return ulid.MustNew(ulid.Timestamp(time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC)), rand.Reader)
}

// Graph a imports an object graph b wrote; b's cleanup then reclaims it, and a's main
// named a missing object. The import is now invalid (exit 2) before anything is written,
// for b's object, for a key under b's prefix that is not graft-shaped, and for a
// graft-shaped key where no graph exists; b's cleanup reclaims its own object and a is
// whole.
func TestOwnership_ImportOfAnotherGraphsObject_IsInvalidWritesNothing_ThatGraphsCleanupCannotReachThisOne(t *testing.T) {
	eachBackendCLI(t, func(t *testing.T, p *ownerStack) {
		a, b := p.name("a"), p.name("b")
		wantCode(t, p.run("graph", "init", a), 0)
		wantCode(t, p.run("graph", "init", b), 0)
		wantCode(t, p.run("table", "write", b, "main", "t", p.file("b1", "b's first")), 0)
		keys := p.objectKeys(b, "main", "t")
		if len(keys) != 1 || !strings.HasPrefix(keys[0], b+"/tables/t/objects/") {
			t.Fatalf("b's objects: %v", keys)
		}
		borrowed := keys[0]

		before := p.bucket()
		wantText(t, p.run("table", "write", a, "main", "borrowed", "--import", borrowed), 2, "invalid",
			borrowed, "shaped like a key graft writes", "outside every graph's prefix")
		landed := b + "/landed/part-0.csv"
		p.put(landed, "landed by another tool under b")
		before[landed] = p.bucket()[landed]
		wantText(t, p.run("table", "write", a, "main", "borrowed", "--import", landed), 2, "invalid",
			landed, b+"/graph.json exists")
		shaped := p.name("c") + "/tables/t/objects/" + oldULID().String()
		p.put(shaped, "graft-shaped, no graph c yet")
		before[shaped] = p.bucket()[shaped]
		rep := jsonErr(t, p.run("-o", "json", "table", "write", a, "main", "borrowed", "--import", shaped))
		if rep.Outcome != "invalid" || rep.ExitCode != 2 || !strings.Contains(rep.Message, "whether or not a graph exists there now") {
			t.Fatalf("import of a graft-shaped key: %+v", rep)
		}
		if after := p.bucket(); !maps.Equal(before, after) {
			t.Fatalf("refused imports changed the bucket:\nbefore %v\nafter  %v", before, after)
		}

		// b writes two new versions and cleans up as the report did: its own object goes.
		wantCode(t, p.run("table", "write", b, "main", "t", p.file("b2", "b's second")), 0)
		wantCode(t, p.run("table", "write", b, "main", "t", p.file("b3", "b's third")), 0)
		wantCode(t, p.run("cleanup", "run", b, "--keep-newest", "1", "--guard-window", "0", "--wait"), 0)
		if p.exists(borrowed) {
			t.Fatalf("b's cleanup kept %s, which only b's reclaimed version named", borrowed)
		}
		for _, k := range []string{landed, shaped} {
			if !p.exists(k) {
				t.Fatalf("%s, which graft never wrote, is gone", k)
			}
		}
		// a never named it: nothing of a is missing.
		wantCode(t, p.run("table", "objects", a, "main", "borrowed"), 6)
		wantCode(t, p.run("table", "write", a, "main", "own", p.file("a1", "a's own")), 0)
		r := p.run("table", "objects", a, "main", "own", "--verify")
		wantStdout(t, r, "verified 1 of 1 objects")
	})
}

// Objects land under x/ (another tool's, another deployment's); were `graph init x` to
// succeed, a later cleanup of x would delete them. Init is conflict (exit 5) naming one
// and what to do, writes nothing, and a cleanup of x finds no graph; once they are
// moved, the same init runs and repeating it is idempotent. An old object copied under
// x's prefix later is never deleted by x's cleanup.
func TestOwnership_InitOnAPrefixHoldingForeignObjects_IsConflictWritesNothing_AndTheyOutliveCleanup(t *testing.T) {
	eachBackendCLI(t, func(t *testing.T, p *ownerStack) {
		x := p.name("x")
		foreign := x + "/tables/t/objects/" + oldULID().String()
		landed := x + "/landed/part-0.csv"
		p.put(foreign, "another deployment's object")
		p.put(landed, "another tool's file")
		before := p.bucket()

		wantText(t, p.run("graph", "init", x), 5, "conflict",
			landed, "graft did not write for this graph", "nothing was written",
			"a graph owns its whole prefix "+x+"/", "run the init again")
		rep := jsonErr(t, p.run("-o", "json", "graph", "init", x))
		if rep.Outcome != "conflict" || rep.ExitCode != 5 || !strings.Contains(rep.Message, landed) {
			t.Fatalf("json report %+v", rep)
		}
		if after := p.bucket(); !maps.Equal(before, after) {
			t.Fatalf("a refused init changed the bucket:\nbefore %v\nafter  %v", before, after)
		}
		wantCode(t, p.run("cleanup", "run", x, "--keep-newest", "1", "--guard-window", "0", "--wait"), 6)
		for k := range before {
			if !p.exists(k) {
				t.Fatalf("%s is gone", k)
			}
		}

		// The operator moves them out of the prefix; the same init (its default operation
		// id was not used up) then creates x, and repeating it is idempotent.
		p.del(foreign)
		p.del(landed)
		p.put("landing-"+x+"/part-0.csv", "another tool's file")
		r := p.run("graph", "init", x, "-o", "json")
		wantCode(t, r, 0)
		first := jsonOut[workflows.InitGraphResult](t, r)
		if !first.Created {
			t.Fatalf("init after the move: %+v; want created", first)
		}
		r = p.run("graph", "init", x, "-o", "json")
		wantCode(t, r, 0)
		if again := jsonOut[workflows.InitGraphResult](t, r); again.Created || again.Root != first.Root || again.OpID != first.OpID {
			t.Fatalf("repeated init: %+v; want the first one's graph, not created", again)
		}

		// A copy of the old object lands under x later (a restore from a backup): x's
		// cleanup reclaims what x wrote and leaves it.
		p.put(foreign, "another deployment's object")
		for i, body := range []string{"one", "two", "three"} {
			wantCode(t, p.run("table", "write", x, "main", "t", p.file(fmt.Sprint("x", i), body)), 0)
		}
		r = p.run("cleanup", "run", x, "--keep-newest", "1", "--guard-window", "0", "--wait", "-o", "json")
		wantCode(t, r, 0)
		var res struct {
			Deleted struct {
				Versions int64 `json:"versions"`
			} `json:"deleted"`
			Kept struct {
				Unknown int64 `json:"unknown"`
			} `json:"kept"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("cleanup result: %v\n%s", err, r)
		}
		if res.Deleted.Versions != 2 || res.Kept.Unknown < 1 {
			t.Fatalf("cleanup deleted %+v, kept %+v; want x's two old versions deleted and the foreign object counted unknown", res.Deleted, res.Kept)
		}
		var left []string
		for k := range p.bucket() {
			if strings.HasPrefix(k, x+"/tables/t/objects/") {
				left = append(left, k)
			}
		}
		if !p.exists(foreign) || len(left) != 2 {
			t.Fatalf("objects of x's table t after cleanup: %v; want the newest version's and %s", left, foreign)
		}
		wantCode(t, p.run("table", "objects", x, "main", "t", "--verify"), 0)
	})
}

// A graph created later on a prefix another graph imported from could delete the
// imported object: the init is refused because the prefix holds it.
func TestOwnership_GraphCreatedLaterOnAPrefixAnotherGraphImportedFrom_IsRefused(t *testing.T) {
	eachBackendCLI(t, func(t *testing.T, p *ownerStack) {
		a, landing := p.name("a"), p.name("landing")
		wantCode(t, p.run("graph", "init", a), 0)
		imported := landing + "/day1/a.csv"
		p.put(imported, "landed")
		wantCode(t, p.run("table", "write", a, "main", "t", "--import", imported), 0)
		before := p.bucket()
		wantText(t, p.run("graph", "init", landing), 5, "conflict", imported)
		if after := p.bucket(); !maps.Equal(before, after) {
			t.Fatalf("a refused init changed the bucket:\nbefore %v\nafter  %v", before, after)
		}
		r := p.run("table", "objects", a, "main", "t", "--verify")
		wantStdout(t, r, "verified 1 of 1 objects")
	})
}

// An object a branch names is deleted behind graft's back: the listing still lists it
// (it reads the version only), --verify HEADs every object and exits not_found naming
// it; an object rewritten with other bytes is conflict; restored, verify passes.
func TestTableObjectsVerify_ObjectGoneBehindGraftsBack_ExitsNotFoundNamingIt(t *testing.T) {
	eachBackendCLI(t, func(t *testing.T, p *ownerStack) {
		g := p.name("g")
		wantCode(t, p.run("graph", "init", g), 0)
		wantCode(t, p.run("table", "write", g, "main", "t", p.file("a", "aaaa"), p.file("b", "bbbb")), 0)
		keys := p.objectKeys(g, "main", "t")
		if len(keys) != 2 {
			t.Fatalf("objects %v", keys)
		}
		gone, changed := keys[0], keys[1]
		p.del(gone)
		if got := p.objectKeys(g, "main", "t"); len(got) != 2 {
			t.Fatalf("the listing names %v; it reads the version only", got)
		}
		// Progress lines on stderr, then the error naming the missing object.
		r := p.run("table", "objects", g, "main", "t", "--verify")
		wantCode(t, r, 6)
		for _, want := range []string{"verify objects 0/2", "checked 2/2 (100%)", "\ngraft: not_found: 1 of 2 objects of table t at main", gone, "\nnext: ", "put them back"} {
			if !strings.Contains(r.stderr, want) {
				t.Fatalf("stderr lacks %q:\n%s", want, r)
			}
		}
		if r.stdout != "" {
			t.Fatalf("a failed verify wrote to stdout:\n%s", r)
		}
		rep := jsonErr(t, p.run("-o", "json", "table", "objects", g, "main", "t", "--verify"))
		if rep.Outcome != "not_found" || rep.ExitCode != 6 || !strings.Contains(rep.Message, gone) {
			t.Fatalf("json report %+v", rep)
		}

		p.put(gone, "aaaa") // back, as from a backup (verify compares sizes)
		p.put(changed, "rewritten with more bytes")
		r = p.run("table", "objects", g, "main", "t", "--verify")
		wantCode(t, r, 5)
		if !strings.Contains(r.stderr, "graft: conflict: 1 of 2 objects") || !strings.Contains(r.stderr, changed+" (25 bytes, the entry says 4)") {
			t.Fatalf("a changed object:\n%s", r)
		}
		p.put(changed, "bbbb")
		r = p.run("table", "objects", g, "main", "t", "--verify", "-o", "json")
		wantCode(t, r, 0)
		if v := jsonOut[client.TableVerification](t, r); v.Objects != 2 || v.Verified != 2 || len(v.Missing)+len(v.Changed) != 0 {
			t.Fatalf("verification %+v", v)
		}
	})
}
