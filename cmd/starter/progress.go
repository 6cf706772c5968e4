package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// newProgress returns the reporter long commands draw on w: one line
// redrawn in place on a terminal, plain lines — one per phase, and one every
// plainEvery while a phase lasts — anywhere else (a pipe, a log file), so no
// control character ends up in a log.
func newProgress(w io.Writer) *lineProgress {
	f, ok := w.(*os.File)
	return &lineProgress{w: w, tty: ok && term.IsTerminal(int(f.Fd())), now: time.Now}
}

// progress is the reporter of a long command: newProgress on stderr, nil,
// which draws nothing, in json mode.
func (a *app) progress(cmd *cobra.Command) *lineProgress {
	if a.cfg.Output != outputText {
		return nil
	}
	return newProgress(cmd.ErrOrStderr())
}

// lineProgress draws the current phase and its count. It holds no goroutine:
// a line is drawn only by Update, so nothing of an earlier phase is drawn
// after the next one began.
type lineProgress struct {
	w   io.Writer
	tty bool
	now func() time.Time

	phase       string
	done, total int64
	phaseStart  time.Time
	lastPlain   time.Time
	drawn       bool
}

const (
	barWidth = 30
	// plainEvery spaces the lines a non-terminal gets while a phase lasts.
	plainEvery = 10 * time.Second
)

// Update shows done of total units in phase; total 0 means unknown.
func (p *lineProgress) Update(phase string, done, total int64) {
	if p == nil {
		return
	}
	if total > 0 && done > total {
		done = total
	}
	now := p.now()
	changed := phase != p.phase
	if !changed && done == p.done && total == p.total && p.drawn {
		return
	}
	if changed {
		p.phaseStart = now
	}
	p.phase, p.done, p.total = phase, done, total
	line := p.line(now)
	if p.tty {
		fmt.Fprintf(p.w, "\r\x1b[K%s", line)
		p.drawn = true
		return
	}
	if changed || now.Sub(p.lastPlain) >= plainEvery {
		fmt.Fprintln(p.w, line)
		p.lastPlain = now
	}
}

// line is the current state, e.g. "sweep   [=====>     ] 512/1024 (50%) 12s".
func (p *lineProgress) line(now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-7s", p.phase)
	switch {
	case p.total > 0:
		pct := p.done * 100 / p.total
		if p.tty {
			filled := int(p.done * barWidth / p.total)
			b.WriteString(" [" + strings.Repeat("=", filled) + strings.Repeat(" ", barWidth-filled) + "]")
		}
		fmt.Fprintf(&b, " %d/%d (%d%%)", p.done, p.total, pct)
	case p.done > 0:
		fmt.Fprintf(&b, " %d", p.done)
	}
	fmt.Fprintf(&b, " %s", now.Sub(p.phaseStart).Round(time.Second))
	return b.String()
}

// Finish ends the display, leaving the last state on its own line.
func (p *lineProgress) Finish() {
	if p == nil {
		return
	}
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
	p.phase, p.done, p.total, p.drawn = "", 0, 0, false
}

// pollEvery calls fn at once and then every progressInterval, until the stop it returns
// is called; stop returns once fn no longer runs.
func pollEvery(ctx context.Context, fn func(ctx context.Context)) (stop func()) {
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(progressInterval)
		defer tick.Stop()
		for {
			fn(pctx)
			select {
			case <-pctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}
