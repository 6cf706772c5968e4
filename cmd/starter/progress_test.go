package main

import (
	"strings"
	"testing"
	"time"
)

// fakeClock steps one second per reading.
func fakeClock() func() time.Time {
	t := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return func() time.Time { t = t.Add(time.Second); return t }
}

func TestProgress_OnATerminal_RedrawsOneLineInPlace_EndsWithNewline(t *testing.T) {
	var b strings.Builder
	p := &lineProgress{w: &b, tty: true, now: fakeClock()}
	p.Update("mark", 1, 4)
	p.Update("sweep", 512, 1024)
	p.Update("done", 1024, 1024)
	p.Finish()
	out := b.String()
	if !strings.HasPrefix(out, "\r") || !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 || strings.Count(out, "\r") != 3 {
		t.Fatalf("want three in-place redraws on one line ended by a newline, got %q", out)
	}
	for _, want := range []string{"mark", "1/4 (25%)", "sweep", "512/1024 (50%)", "done", "1024/1024 (100%)"} {
		if !strings.Contains(out, want) {
			t.Errorf("progress output lacks %q: %q", want, out)
		}
	}
}

func TestProgress_NotATerminal_PlainLinesWithoutControlCharacters(t *testing.T) {
	var b strings.Builder
	p := newProgress(&b) // a strings.Builder is no terminal
	p.Update("mark", 0, 0)
	p.Update("mark", 1, 3) // the same phase within plainEvery: no new line
	p.Update("sweep", 5, 10)
	p.Update("done", 10, 10)
	p.Finish()
	out := b.String()
	if strings.ContainsAny(out, "\r\x1b") {
		t.Fatalf("control characters written to a non-terminal: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "mark") || !strings.Contains(lines[1], "sweep   5/10 (50%)") ||
		!strings.Contains(lines[2], "done    10/10 (100%)") {
		t.Fatalf("want one line per phase, got %q", lines)
	}
}

func TestProgress_NewPhase_NothingOfTheOldOneIsDrawnAgain(t *testing.T) {
	var b strings.Builder
	p := &lineProgress{w: &b, tty: true, now: fakeClock()}
	p.Update("mark", 0, 0)
	p.Update("sweep", 1, 23)
	before := b.String()
	time.Sleep(300 * time.Millisecond) // an old spinner's goroutine would draw by now
	if b.String() != before {
		t.Fatalf("drawn without an update: %q", strings.TrimPrefix(b.String(), before))
	}
	if strings.Contains(before[strings.LastIndex(before, "\r"):], "mark") {
		t.Fatalf("the last line still shows mark: %q", before)
	}
}

func TestProgress_DoneBeyondTotal_ShowsTheTotal(t *testing.T) {
	var b strings.Builder
	p := &lineProgress{w: &b, tty: true, now: fakeClock()}
	p.Update("sweep", 12, 10)
	p.Finish()
	if out := b.String(); !strings.Contains(out, "10/10") || strings.Contains(out, "12/10") {
		t.Fatalf("got %q, want the count capped at 10/10", out)
	}
}
