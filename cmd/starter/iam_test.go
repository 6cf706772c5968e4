package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/devstack"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/s3"
	"github.com/graftworks/graft/workflows"
)

// The least-privilege policies of docs/s3-servers.md, proven on a real server:
// versitygw with its internal IAM, one plain account for the CLI and one for
// the worker, and a bucket policy made of docs/policies/cli.json and
// docs/policies/worker.json, each statement given its account as Principal.
// versitygw evaluates the policies' Allow and Deny statements, wildcard
// resources and the s3:prefix Condition, so nothing of them is left out.

const (
	iamCLIAccess, iamCLISecret       = "graft-cli", "graft-cli-secret-0123456789"
	iamWorkerAccess, iamWorkerSecret = "graft-worker", "graft-worker-secret-0123456789"
	// iamPrefix is the store prefix (--s3-prefix), the policies' PREFIX; two
	// segments, so the policies' wildcards are seen to span them.
	iamPrefix = "deploy/graft"
)

// iamPolicyStatements reads docs/policies/<file>, fills in bucket and
// prefix, and names principal in each statement, as an operator turns the
// identity policy into statements of a bucket policy.
func iamPolicyStatements(t *testing.T, file, principal, bucket, prefix string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "policies", file))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.NewReplacer("arn:aws:s3:::BUCKET", "arn:aws:s3:::"+bucket, "PREFIX/", prefix+"/").Replace(string(b))
	if strings.Contains(text, "BUCKET") || strings.Contains(text, "PREFIX") {
		t.Fatalf("%s has a placeholder outside the ARNs and prefixes the page documents:\n%s", file, text)
	}
	var doc struct {
		Version   string
		Statement []map[string]any
	}
	if err := json.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if doc.Version != "2012-10-17" || len(doc.Statement) == 0 {
		t.Fatalf("%s: version %q, %d statements", file, doc.Version, len(doc.Statement))
	}
	for _, st := range doc.Statement {
		if _, ok := st["Principal"]; ok {
			t.Fatalf("%s: an identity policy names no Principal: %v", file, st)
		}
		st["Principal"] = map[string]any{"AWS": []string{principal}}
	}
	return doc.Statement
}

// iamStack is versitygw with IAM, a bucket under the two policies, a ledger
// schema, and a graft-worker holding the worker's keys on a queue of its own.
type iamStack struct {
	bucket string
	root   *s3.Store // the bucket's owner, under the store prefix: what is really there
	cli    *s3.Store // graft's own S3 store with the CLI's keys, under the store prefix
	// cliEnv is the environment of a graft command holding the CLI's keys.
	cliEnv   []string
	endpoint string
}

func startIAMStack(t *testing.T) *iamStack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute) // may build graft-worker cold
	defer cancel()

	dir := t.TempDir()
	gw, err := devstack.StartVersityGW(ctx, devstack.VersityOptions{Dir: filepath.Join(dir, "data"), IAMDir: filepath.Join(dir, "iam")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Stop(5 * time.Second) })
	var b [4]byte
	rand.Read(b[:])
	bucket := fmt.Sprintf("graft-iam-%x", b)
	if err := devstack.CreateBucket(ctx, gw.Endpoint, gw.Region, gw.AccessKey, gw.SecretKey, bucket); err != nil {
		t.Fatal(err)
	}
	for _, u := range [][2]string{{iamCLIAccess, iamCLISecret}, {iamWorkerAccess, iamWorkerSecret}} {
		if err := gw.CreateUser(ctx, u[0], u[1]); err != nil {
			t.Fatal(err)
		}
	}
	statements := append(iamPolicyStatements(t, "cli.json", iamCLIAccess, bucket, iamPrefix),
		iamPolicyStatements(t, "worker.json", iamWorkerAccess, bucket, iamPrefix)...)
	policy, err := json.Marshal(map[string]any{"Version": "2012-10-17", "Statement": statements})
	if err != nil {
		t.Fatal(err)
	}
	if err := devstack.SetBucketPolicy(ctx, gw.Endpoint, gw.Region, gw.AccessKey, gw.SecretKey, bucket, string(policy)); err != nil {
		t.Fatalf("install the bucket policy: %v\n%s", err, policy)
	}

	store := func(access, secret, prefix string) *s3.Store {
		st, err := s3.New(ctx, s3.Config{Endpoint: gw.Endpoint, Region: gw.Region, Bucket: bucket, Prefix: prefix,
			PathStyle: true, AccessKeyID: access, SecretAccessKey: secret})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	s := &iamStack{bucket: bucket, endpoint: gw.Endpoint,
		root: store(gw.AccessKey, gw.SecretKey, iamPrefix), cli: store(iamCLIAccess, iamCLISecret, iamPrefix)}

	ts := testenv.Temporal(t)
	common := []string{
		"GRAFT_TEMPORAL_ADDRESS=" + ts.HostPort, "GRAFT_NAMESPACE=" + ts.Namespace,
		"GRAFT_TASK_QUEUE=graft-iam-" + strings.ToLower(ulid.Make().String()),
		"DATABASE_URL=" + catalogtest.DatabaseURL(), "GRAFT_DB_SCHEMA=" + catalogtest.NewSchema(t),
		"GRAFT_S3_ENDPOINT=" + gw.Endpoint, "GRAFT_S3_BUCKET=" + bucket, "GRAFT_S3_PREFIX=" + iamPrefix,
		"GRAFT_S3_REGION=" + gw.Region, "GRAFT_S3_PATH_STYLE=true",
	}
	s.cliEnv = append(slices.Clone(common), "AWS_ACCESS_KEY_ID="+iamCLIAccess, "AWS_SECRET_ACCESS_KEY="+iamCLISecret)

	workerBin, err := devstack.BuildGraftWorker(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w, err := devstack.StartGraftWorker(ctx, devstack.GraftWorkerOptions{Binary: workerBin,
		Env:     append(slices.Clone(common), "AWS_ACCESS_KEY_ID="+iamWorkerAccess, "AWS_SECRET_ACCESS_KEY="+iamWorkerSecret),
		LogFile: filepath.Join(t.TempDir(), "worker.log")})
	if err != nil {
		t.Fatalf("graft-worker with the worker's keys: %v", err)
	}
	t.Cleanup(func() {
		if err := w.Terminate(45 * time.Second); err != nil {
			t.Errorf("graft-worker: %v", err)
		}
		if t.Failed() {
			t.Logf("graft-worker log (tail):\n%s", w.Output())
		}
	})
	return s
}

// wantRefused fails unless err is storage's refusal of a request the server
// answered 403.
func wantRefused(t *testing.T, what string, err error) {
	t.Helper()
	var se *storage.Error
	if !errors.Is(err, storage.ErrRefused) || !errors.As(err, &se) || se.Status != 403 {
		t.Fatalf("%s with the CLI's keys: want refused (HTTP 403), got %v", what, err)
	}
}

// TestLeastPrivilegePolicies_CLIKeysUploadAndRead_WorkerKeysPublishAndReclaim_CLIKeysCannotPublishOrDelete
// runs the built graft (the CLI's keys) against a built graft-worker (the
// worker's keys) through init, table writes — a multipart object, an import
// by reference, a staged list of more objects than a request holds inline —
// a branch, a merge, a tag, reads, a branch delete and a cleanup sweep that
// deletes; then, with the CLI's keys through graft's own S3 store, every
// write only the worker may make is refused with 403 and changes nothing.
func TestLeastPrivilegePolicies_CLIKeysUploadAndRead_WorkerKeysPublishAndReclaim_CLIKeysCannotPublishOrDelete(t *testing.T) {
	bin := buildGraft(t)
	s := startIAMStack(t)
	ctx := t.Context()
	run := func(args ...string) result {
		t.Helper()
		return runGraft(t, bin, s.cliEnv, append(args, "-o", "json")...)
	}
	const g = "iam"
	dir := t.TempDir()
	file := func(name string, body []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write := func(branch, table string, args ...string) workflows.WriteTableResult {
		t.Helper()
		r := run(append([]string{"table", "write", g, branch, table}, args...)...)
		wantCode(t, r, 0)
		res := jsonOut[workflows.WriteTableResult](t, r)
		if res.Outcome != outcome.Done {
			t.Fatalf("write %s on %s: %+v", table, branch, res)
		}
		return res
	}

	wantCode(t, run("graph", "init", g), 0)

	// A small object and one of two parts (5 MiB + 1 MiB, above a 1 MiB
	// threshold): puts, then create, parts and a complete of a multipart upload.
	big := make([]byte, 6<<20)
	rand.Read(big)
	events := write("main", "events", "--multipart-threshold", fmt.Sprint(1<<20), "--part-size", fmt.Sprint(5<<20),
		file("a.csv", []byte("id\n1\n")), file("big.bin", big))
	if events.Objects != 2 || events.Bytes != int64(len(big))+5 {
		t.Fatalf("events write %+v", events)
	}

	r := run("branch", "create", g, "feature/x")
	wantCode(t, r, 0)
	write("feature/x", "scores", file("s.csv", []byte("id,score\n1,9\n")))

	// An import by reference HEADs an object another tool wrote under the
	// store prefix, outside every graph: the CLI and the worker read it.
	if _, err := s.root.Put(ctx, "raw/people.csv", []byte("id,name\n1,ada\n"), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	write("main", "people", "--import", "raw/people.csv")

	r = run("merge", g, "feature/x")
	wantCode(t, r, 0)
	if m := jsonOut[workflows.MergeResult](t, r); m.Outcome != outcome.Merged || m.Commit == "" {
		t.Fatalf("merge %+v", m)
	}

	// More objects than a request lists inline: the CLI stages the list as a
	// table version with its manifest chunks (docs/format.md, "Staged object lists").
	var wide []string
	for i := range workflows.MaxInlineObjects + 1 {
		wide = append(wide, file(fmt.Sprintf("w-%04d.csv", i), fmt.Appendf(nil, "id\n%d\n", i)))
	}
	if res := write("main", "wide", wide...); res.Objects != len(wide) {
		t.Fatalf("staged write %+v", res)
	}

	// Reads: branches, history, and every object of a table HEADed.
	r = run("branch", "list", g)
	wantCode(t, r, 0)
	if bl := jsonOut[branchList](t, r); len(bl.Branches) != 2 {
		t.Fatalf("branch list %+v", bl)
	}
	wantCode(t, run("log", g, "main"), 0)
	r = run("table", "objects", g, "main", "events", "--verify")
	wantCode(t, r, 0)
	if v := jsonOut[client.TableVerification](t, r); v.Objects != 2 || v.Verified != 2 {
		t.Fatalf("verify events %+v", v)
	}
	r = run("table", "objects", g, "main", "events")
	wantCode(t, r, 0)
	eventObjects := jsonOut[client.TableListing](t, r).Objects
	var bigKey string
	for _, o := range eventObjects {
		if o.Size == int64(len(big)) {
			bigKey = o.Key
		}
	}
	if info, err := s.root.Head(ctx, bigKey); err != nil || !strings.HasSuffix(strings.Trim(info.ETag, `"`), "-2") {
		t.Fatalf("the big object %q: %+v, %v; want the ETag of a two-part upload", bigKey, info, err)
	}

	// With the CLI's keys, through graft's own store: what only the worker does.
	t.Run("CLIKeysRefused", func(t *testing.T) {
		page, err := s.root.List(ctx, storage.ListOptions{Prefix: format.BranchRefPrefix(g, "main")})
		if err != nil || len(page.Objects) != 1 {
			t.Fatalf("main's ref: %+v, %v", page, err)
		}
		refKey := page.Objects[0].Key
		ref, err := s.root.Get(ctx, refKey)
		if err != nil {
			t.Fatal(err)
		}
		// The ref's own bytes under its own ETag: had the policy allowed it,
		// the swap would succeed.
		_, err = s.cli.Put(ctx, refKey, ref.Body, storage.PutOptions{IfMatch: ref.ETag})
		wantRefused(t, "a swap of main's ref (If-Match)", err)

		wantRefused(t, "a delete of a data object", s.cli.Delete(ctx, bigKey))
		var be *storage.BatchError
		if err := s.cli.DeleteBatch(ctx, []string{bigKey}); !errors.As(err, &be) || !errors.Is(be.Failed[bigKey], storage.ErrRefused) {
			t.Fatalf("a batch delete of a data object with the CLI's keys: want the key refused, got %v", err)
		}

		hash := strings.Repeat("ab", 32)
		fresh := ulid.Make()
		for what, key := range map[string]string{
			"a commit":                format.TreeCommitsPrefix(g, fresh) + "0000000000000000000-" + strings.Repeat("c", 32) + ".json",
			"a pins or lineage chunk": format.ChunksPrefix(g) + hash + ".json",
			"a graph record":          format.GraphKey("other"),
			"a ref of a new branch":   format.BranchRefKey(g, "y."+fresh.String()),
			"a tag":                   format.TagKey(g, "v9"),
			// Names whose keys the CLI's Allow patterns match: its Deny refuses them.
			"a ref named like a data object":    format.BranchRefKey(g, "tables/t/objects/y."+fresh.String()),
			"a tag named like an upload record": format.TagKey(g, "a/uploads/b"),
		} {
			_, err := s.cli.Put(ctx, key, []byte("{}"), storage.PutOptions{IfNoneMatch: true})
			wantRefused(t, "a put-if-absent of "+what+" ("+key+")", err)
			if _, err := s.root.Head(ctx, key); !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("%s after the refused put: %v", key, err)
			}
		}

		// Nothing changed.
		after, err := s.root.Get(ctx, refKey)
		if err != nil || after.ETag != ref.ETag {
			t.Fatalf("main's ref after the refused swap: %v, %v", after.ETag, err)
		}
		if _, err := s.root.Head(ctx, bigKey); err != nil {
			t.Fatalf("the data object after the refused deletes: %v", err)
		}

		// The s3:prefix Condition holds: a listing outside the store prefix is
		// refused (a read's refusal is reported unavailable, with its 403).
		whole, err := s3.New(ctx, s3.Config{Endpoint: s.endpoint, Region: "us-east-1", Bucket: s.bucket, PathStyle: true,
			AccessKeyID: iamCLIAccess, SecretAccessKey: iamCLISecret})
		if err != nil {
			t.Fatal(err)
		}
		var se *storage.Error
		if _, err := whole.List(ctx, storage.ListOptions{Limit: 1}); !errors.As(err, &se) || se.Status != 403 {
			t.Fatalf("a listing of the whole bucket with the CLI's keys: want HTTP 403, got %v", err)
		}
	})

	// What the CLI does after a failed upload: abort it, and list by the exact key.
	t.Run("CLIKeysAbortAnUpload", func(t *testing.T) {
		key := format.ObjectKey(g, "events", ulid.Make())
		id, err := s.cli.CreateMultipart(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.cli.AbortMultipart(ctx, key, id); err != nil {
			t.Fatalf("abort with the CLI's keys: %v", err)
		}
		page, err := s.cli.ListMultipart(ctx, storage.ListMultipartOptions{Prefix: key})
		if err != nil || len(page.Uploads) != 0 {
			t.Fatalf("uploads of %s after the abort, listed with the CLI's keys: %+v, %v", key, page, err)
		}
	})

	// The worker reclaims: events replaced, feature/x deleted, a sweep
	// keeping main's head deletes the old objects (the multipart one among them).
	write("main", "events", file("b.csv", []byte("id\n2\n")))
	wantCode(t, run("branch", "delete", g, "feature/x"), 0)
	wantCode(t, run("tag", "create", g, "v1"), 0)
	wantCode(t, run("tag", "show", g, "v1"), 0)
	r = run("cleanup", "run", g, "--keep-newest", "1", "--guard-window", "0", "--wait")
	wantCode(t, r, 0)
	cl := jsonOut[cleanupView](t, r)
	if cl.Outcome != outcome.Done || cl.Refused != 0 || cl.Deleted.Commits == 0 || cl.Deleted.Objects < int64(len(eventObjects)) {
		t.Fatalf("cleanup %+v", cl)
	}
	for _, o := range eventObjects {
		if _, err := s.root.Head(ctx, o.Key); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("%s after the sweep: %v", o.Key, err)
		}
	}
}

// TestS3ServersPage_ShowsEachPolicyFileVerbatim keeps docs/s3-servers.md and
// docs/policies/*.json from drifting: every JSON block on the page is one of
// the files, byte for byte, right after the line that names it, and every
// file is on the page once.
func TestS3ServersPage_ShowsEachPolicyFileVerbatim(t *testing.T) {
	root := repoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "docs", "policies", "*.json"))
	if err != nil || len(files) < 2 {
		t.Fatalf("policy files: %v, %v", files, err)
	}
	want := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		want["docs/policies/"+filepath.Base(f)] = string(b)
	}
	page, err := os.Open(filepath.Join(root, "docs", "s3-servers.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer page.Close()

	seen := map[string]int{}
	var named, block string // the policy the last text line named; the JSON block being read
	inBlock := false
	sc := bufio.NewScanner(page)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case inBlock && line == "```":
			inBlock = false
			if named == "" {
				t.Errorf("s3-servers.md:%d: a JSON block that follows no line naming a docs/policies file", n)
				continue
			}
			if block != want[named] {
				t.Errorf("s3-servers.md:%d: the block shown for %s differs from the file:\n%s", n, named, block)
			}
			seen[named]++
			named = ""
		case inBlock:
			block += line + "\n"
		case line == "```json":
			inBlock, block = true, ""
		case strings.TrimSpace(line) != "":
			named = ""
			for name := range want {
				if strings.Contains(line, "`"+name+"`") {
					named = name
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for name := range want {
		if seen[name] != 1 {
			t.Errorf("s3-servers.md shows %s %d times; want once", name, seen[name])
		}
	}
}
