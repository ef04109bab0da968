package kubelet

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseLogOptions(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  logOptions
		err   string
	}{
		{query: "", want: logOptions{tailLines: -1, limitBytes: -1}},
		{query: "follow=true&previous=1&tailLines=3&limitBytes=10&container=x&stream=All",
			want: logOptions{follow: true, previous: true, tailLines: 3, limitBytes: 10}},
		{query: "tail=5", want: logOptions{tailLines: 5, limitBytes: -1}},
		{query: "tail=all&tailLines=2", want: logOptions{tailLines: -1, limitBytes: -1}},
		{query: "tailLines=0", want: logOptions{tailLines: 0, limitBytes: -1}},
		{query: "timestamps=false", want: logOptions{tailLines: -1, limitBytes: -1}},
		{query: "follow=yes", err: `follow "yes": want true or false`},
		{query: "tailLines=-1", err: "tailLines"},
		{query: "tailLines=x", err: "tailLines"},
		{query: "limitBytes=0", err: "limitBytes"},
		{query: "timestamps=true", err: "no time for each log line"},
		{query: "sinceSeconds=10", err: "sinceSeconds"},
		{query: "sinceTime=2026-01-01T00:00:00Z", err: "sinceTime"},
		{query: "stream=Stdout", err: "stdout and stderr to one file"},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseLogOptions(q)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one saying %q", tc.query, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.query, err)
		case tc.err == "" && got != tc.want:
			t.Errorf("%q: %+v, want %+v", tc.query, got, tc.want)
		}
	}
}

// segmentFile writes a log file as runCmd does (header, output, closing
// line) and returns the segment of the output.
func segmentFile(t *testing.T, output string, ended bool) (logSegment, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.log")
	header := "=== 2026-01-01T00:00:00Z: starting x\n"
	content := "earlier run\n" + header + output
	if ended {
		content += "=== exited: exit status 0\n"
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	start := int64(len("earlier run\n" + header))
	end := int64(-1)
	if ended {
		end = start + int64(len(output))
	}
	return logSegment{path: path, start: start, end: func() int64 { return end }}, path
}

func readLog(t *testing.T, seg logSegment, o logOptions) string {
	t.Helper()
	var b bytes.Buffer
	if err := writeLog(context.Background(), &b, func() {}, seg, o); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestWriteLog(t *testing.T) {
	all := logOptions{tailLines: -1, limitBytes: -1}
	seg, _ := segmentFile(t, "one\ntwo\nthree\n", true)
	if got := readLog(t, seg, all); got != "one\ntwo\nthree\n" {
		t.Errorf("whole run: %q", got)
	}
	for n, want := range map[int64]string{0: "", 1: "three\n", 2: "two\nthree\n", 3: "one\ntwo\nthree\n", 9: "one\ntwo\nthree\n"} {
		o := all
		o.tailLines = n
		if got := readLog(t, seg, o); got != want {
			t.Errorf("tailLines=%d: %q, want %q", n, got, want)
		}
	}
	o := all
	o.limitBytes = 5
	if got := readLog(t, seg, o); got != "one\nt" {
		t.Errorf("limitBytes=5: %q", got)
	}
	o.tailLines = 1
	if got := readLog(t, seg, o); got != "three" {
		t.Errorf("tailLines=1 limitBytes=5: %q", got)
	}
	// A last line without a newline is a line; a running program's
	// output goes up to the file's end.
	seg, _ = segmentFile(t, "a\nb", false)
	o = all
	o.tailLines = 1
	if got := readLog(t, seg, o); got != "b" {
		t.Errorf("unterminated last line: %q", got)
	}
}

// follow returns what was written while the run lasts and ends with it.
func TestWriteLogFollow(t *testing.T) {
	defer func(d time.Duration) { logPoll = d }(logPoll)
	logPoll = 5 * time.Millisecond
	seg, path := segmentFile(t, "first\n", false)
	var end atomic.Int64
	end.Store(-1)
	seg.end = end.Load

	var b syncBuffer
	finished := make(chan error, 1)
	go func() {
		finished <- writeLog(context.Background(), &b, func() {}, seg, logOptions{follow: true, tailLines: -1, limitBytes: -1})
	}()
	waitFor(t, &b, "first\n")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("second\n")
	waitFor(t, &b, "first\nsecond\n")
	// The run ends: its end is set, then the kubelet's closing line
	// is appended, which must not show.
	fi, _ := f.Stat()
	end.Store(fi.Size())
	f.WriteString("=== exited\n")
	f.Close()
	select {
	case err := <-finished:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end with the run")
	}
	if got := b.String(); got != "first\nsecond\n" {
		t.Errorf("followed %q", got)
	}
}

// A follow ends when the client goes away.
func TestWriteLogFollowCancel(t *testing.T) {
	seg, _ := segmentFile(t, "x\n", false)
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan error, 1)
	go func() {
		finished <- writeLog(ctx, &syncBuffer{}, func() {}, seg, logOptions{follow: true, tailLines: -1, limitBytes: -1})
	}()
	cancel()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end with its context")
	}
}

func waitFor(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.String() != want {
		if time.Now().After(deadline) {
			t.Fatalf("log %q, want %q", b.String(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
