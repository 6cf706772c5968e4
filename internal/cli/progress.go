package cli

import (
	"fmt"
	"io"

	"github.com/schollz/progressbar/v3"
)

// progressReporter shows a long command's progress on stderr.
type progressReporter interface {
	// Update shows done of total units in phase; total 0 means unknown.
	Update(phase string, done, total int64)
	// Finish ends the display, leaving the last state on its own line.
	Finish()
}

// newProgress returns the reporter long commands draw on w: a
// github.com/schollz/progressbar bar per phase, redrawn in place.
func newProgress(w io.Writer) progressReporter { return &barProgress{w: w} }

// noProgress draws nothing (json output).
type noProgress struct{}

func (noProgress) Update(string, int64, int64) {}
func (noProgress) Finish()                     {}

// barProgress keeps one bar for the current phase; a new phase or total
// starts a new bar on the same line.
type barProgress struct {
	w     io.Writer
	bar   *progressbar.ProgressBar
	phase string
	total int64
	done  int64
}

const barWidth = 30

func (p *barProgress) Update(phase string, done, total int64) {
	if p.bar != nil && phase == p.phase && total == p.total && done == p.done {
		return
	}
	if p.bar == nil || phase != p.phase || total != p.total {
		max := total
		if max <= 0 {
			max = -1 // unknown total: a spinner with a count
		}
		p.bar = progressbar.NewOptions64(max,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(fmt.Sprintf("%-8s", phase)),
			progressbar.OptionSetWidth(barWidth),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionSetRenderBlankState(true),
		)
		p.phase, p.total = phase, total
	}
	p.done = done
	if total > 0 && done > total {
		done = total
	}
	_ = p.bar.Set64(done)
}

func (p *barProgress) Finish() {
	if p.bar != nil {
		fmt.Fprintln(p.w)
	}
	p.bar, p.phase, p.total, p.done = nil, "", 0, 0
}
