package cli

import (
	"strings"
	"testing"
)

func TestBarProgress_RedrawsInPlace_ShowsPhaseAndCount_EndsWithNewline(t *testing.T) {
	var b strings.Builder
	p := newProgress(&b)
	p.Update("mark", 1, 4)
	p.Update("sweep", 512, 1024)
	p.Update("done", 0, 0)
	p.Finish()
	out := b.String()
	if !strings.HasPrefix(out, "\r") || !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
		t.Fatalf("want in-place redraws on one line ended by a newline, got %q", out)
	}
	for _, want := range []string{"mark", "1/4", "sweep", "512/1024", "done"} {
		if !strings.Contains(out, want) {
			t.Errorf("progress output lacks %q: %q", want, out)
		}
	}
}

func TestBarProgress_DoneBeyondTotal_ShowsTheTotal(t *testing.T) {
	var b strings.Builder
	p := newProgress(&b)
	p.Update("sweep", 12, 10)
	p.Finish()
	if out := b.String(); !strings.Contains(out, "10/10") || strings.Contains(out, "12/10") {
		t.Fatalf("got %q, want the count capped at 10/10", out)
	}
}
