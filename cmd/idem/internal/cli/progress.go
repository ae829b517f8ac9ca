package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows how far a long command is: how many of the demo's sagas
// are finished, how many sagas idem deploy migrate moved.
type progress interface {
	Set(n int)
	Finish()
}

// newProgress returns a progress bar on w when term is a terminal, and
// otherwise plain lines on w, one per tenth of total: a bar redraws
// itself with carriage returns, which a log or a pipe keeps as one long
// line. It returns nil when off.
func newProgress(on bool, term, w io.Writer, total int) progress {
	return newProgressOf(on, term, w, total, "idem demo", "sagas finished")
}

// newProgressOf is newProgress for command cmd, counting what (its bar's
// description and its lines' "cmd: n/total what").
func newProgressOf(on bool, term, w io.Writer, total int, cmd, what string) progress {
	if !on {
		return nil
	}
	if isTerminal(term) {
		return &barProgress{progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(what),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())}
	}
	return &lineProgress{w: w, total: total, cmd: cmd, what: what}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

type barProgress struct{ b *progressbar.ProgressBar }

func (p *barProgress) Set(n int) { _ = p.b.Set(n) }
func (p *barProgress) Finish()   { _ = p.b.Finish() }

// lineProgress prints "cmd: n/total what" at every tenth.
type lineProgress struct {
	w         io.Writer
	total     int
	cmd, what string
	printed   int // tenths printed
}

func (p *lineProgress) Set(n int) {
	tenth := n * 10 / max(p.total, 1)
	if tenth > p.printed {
		p.printed = tenth
		fmt.Fprintf(p.w, "%s: %d/%d %s\n", p.cmd, n, p.total, p.what)
	}
}

func (p *lineProgress) Finish() {}
