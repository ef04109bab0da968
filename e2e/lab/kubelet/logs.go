package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"time"
)

// logOptions are the PodLogOptions the lab kubelet honours.
type logOptions struct {
	follow, previous bool
	// tailLines and limitBytes are -1 when not given.
	tailLines, limitBytes int64
}

// parseLogOptions reads a containerLogs query as the kubelet does
// (PodLogOptions in v1 query form, and the legacy tail=N|all). What the
// lab's log files cannot answer is refused, not approximated: they hold
// each program's raw output, stdout and stderr together, without a time
// for each line.
func parseLogOptions(q url.Values) (logOptions, error) {
	o := logOptions{tailLines: -1, limitBytes: -1}
	var err error
	if o.follow, err = boolParam(q, "follow"); err != nil {
		return o, err
	}
	if o.previous, err = boolParam(q, "previous"); err != nil {
		return o, err
	}
	tail := q.Get("tailLines")
	if t := q.Get("tail"); t != "" {
		tail = t
		if t == "all" {
			tail = ""
		}
	}
	if tail != "" {
		if o.tailLines, err = strconv.ParseInt(tail, 10, 64); err != nil || o.tailLines < 0 {
			return o, fmt.Errorf("tailLines %q: want a number of lines, 0 or more", tail)
		}
	}
	if lb := q.Get("limitBytes"); lb != "" {
		if o.limitBytes, err = strconv.ParseInt(lb, 10, 64); err != nil || o.limitBytes < 1 {
			return o, fmt.Errorf("limitBytes %q: want a number of bytes, 1 or more", lb)
		}
	}
	if ts, err := boolParam(q, "timestamps"); err != nil {
		return o, err
	} else if ts {
		return o, errors.New("timestamps: the lab kubelet keeps no time for each log line (its log files are the programs' raw output)")
	}
	for _, p := range []string{"sinceSeconds", "sinceTime"} {
		if q.Get(p) != "" {
			return o, fmt.Errorf("%s: the lab kubelet keeps no time for each log line, so it cannot cut the log by time", p)
		}
	}
	if s := q.Get("stream"); s != "" && s != "All" {
		return o, fmt.Errorf("stream %q: the lab kubelet logs stdout and stderr to one file and can only return both (All)", s)
	}
	return o, nil
}

func boolParam(q url.Values, name string) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s %q: want true or false", name, v)
	}
	return b, nil
}

// logSegment is one run's output in a container's log file.
type logSegment struct {
	path  string
	start int64
	// end is where the run's output ends, or -1 while it runs.
	end func() int64
}

// segment is p's output.
func (p *process) segment() logSegment {
	return logSegment{path: p.logPath, start: p.logStart, end: p.logEnd.Load}
}

// logPoll is how often a followed log is checked for more output.
var logPoll = 100 * time.Millisecond

// writeLog writes the segment to w per o, calling flush after each
// piece; with follow it waits for more until the run ends or ctx does.
func writeLog(ctx context.Context, w io.Writer, flush func(), seg logSegment, o logOptions) error {
	f, err := os.Open(seg.path)
	if err != nil {
		return err
	}
	defer f.Close()
	pos := seg.start
	if o.tailLines >= 0 {
		if pos, err = tailStart(f, seg.start, seg.bound(f), o.tailLines); err != nil {
			return err
		}
	}
	left := o.limitBytes
	buf := make([]byte, 32<<10)
	for {
		bound := seg.bound(f)
		for pos < bound && left != 0 {
			n := min(int64(len(buf)), bound-pos)
			if left > 0 {
				n = min(n, left)
			}
			got, err := f.ReadAt(buf[:n], pos)
			if got > 0 {
				if _, werr := w.Write(buf[:got]); werr != nil {
					return werr
				}
				pos += int64(got)
				if left > 0 {
					left -= int64(got) // never below 0: got <= left
				}
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			if got == 0 {
				break
			}
		}
		flush()
		if !o.follow || left == 0 || seg.end() >= 0 && pos >= seg.end() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(logPoll):
		}
	}
}

// bound is how far the segment's output goes now: its end once the run
// is over, else the file's size. The size is read first: the end is set
// before the kubelet's closing line is written, so a size read while the
// end was still unset cannot include that line.
func (s logSegment) bound(f *os.File) int64 {
	size := s.start
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	if end := s.end(); end >= 0 {
		return end
	}
	return size
}

// tailStart is where the last n lines of [start, end) begin (a last line
// without a newline counts).
func tailStart(f *os.File, start, end, n int64) (int64, error) {
	if n == 0 {
		return end, nil
	}
	buf := make([]byte, 32<<10)
	pos := end
	lines := int64(0)
	// A newline right at the end closes the last line; it does not start one.
	skipLast := true
	for pos > start {
		size := min(int64(len(buf)), pos-start)
		chunk := buf[:size]
		if _, err := f.ReadAt(chunk, pos-size); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] != '\n' {
				skipLast = false
				continue
			}
			if skipLast {
				skipLast = false
				continue
			}
			lines++
			if lines == n {
				return pos - size + int64(i) + 1, nil
			}
		}
		pos -= size
	}
	return start, nil
}
