package main

import (
	"strings"
	"testing"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage/faults"
)

// TestTagCreate_PutAnsweredAmbiguously_ExitsInDoubtNamingOpWait: the tag's
// puts are lost until the create has exited in doubt, so create exits 4 with the
// operation id and `graft op wait OP` as the next step; once the store answers again,
// op wait follows the settle to created.
func TestTagCreate_PutAnsweredAmbiguously_ExitsInDoubtNamingOpWait(t *testing.T) {
	p := newInProcess(t)
	const g = "mt"
	wantCode(t, p.run(t, "graph", "init", g), 0)
	// Every put of the tag is lost until the rule is removed; the workflow's
	// settle re-issues it on a durable backoff and gets through afterwards.
	remove := p.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: format.TagKey(g, "v1"), Mode: faults.FailBeforeSend})

	r := p.run(t, "tag", "create", g, "v1", "-o", "json")
	rep := jsonErr(t, r)
	if rep.Outcome != "in_doubt" || rep.ExitCode != 4 || rep.OpID == "" || !strings.Contains(rep.Next, "`graft op wait "+rep.OpID+"`") {
		t.Fatalf("report %+v", rep)
	}
	remove()
	r = p.run(t, "op", "wait", rep.OpID, "-o", "json")
	wantCode(t, r, 0)
	if op := jsonOut[opView](t, r); op.Outcome != "created" || op.Kind != "tag" {
		t.Fatalf("op wait %+v", op)
	}
	r = p.run(t, "tag", "show", g, "v1", "-o", "json")
	wantCode(t, r, 0)
	if d := jsonOut[client.TagDetail](t, r); d.State != string(format.TagLive) || !d.Retained || d.Branch != "main" {
		t.Fatalf("tag show %+v", d)
	}
}
