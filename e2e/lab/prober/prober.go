// Package prober is the lab's request prober in a process of its own
// (cmd/lab-prober): it sends GET / to each target on a new connection at a
// steady rate and writes one line per request, so that a test reads what
// the network did and not how long its own process was held up. Found in
// the churn soak (#36, docs/testing.md): the test process stalled for
// over a second while its threads waited on vfork children (`ip`,
// `kubectl`), every request it had in flight then passed its deadline,
// and a capture showed the network had answered each of them. A process
// that forks nothing does not stall that way.
package prober

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Ask sends GET / on c, an open connection to host, and tells whether the
// lab's echo server answered (its page holds "CLIENT VALUES:"). The
// client closes the connection, so TIME_WAIT stays with the client
// (harness.EchoGet says why that matters).
func Ask(c net.Conn, host string, deadline time.Time) (bool, error) {
	return ask(c, bufio.NewReader(c), host, deadline)
}

// ask is Ask reading through br, which a kept connection reuses.
func ask(c net.Conn, br *bufio.Reader, host string, deadline time.Time) (bool, error) {
	_ = c.SetDeadline(deadline)
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
		return false, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, err
	}
	if !strings.Contains(string(b), "CLIENT VALUES:") {
		return false, fmt.Errorf("HTTP %d without the echo server's page", resp.StatusCode)
	}
	return true, nil
}

// Config says what to probe.
type Config struct {
	// Targets are IP addresses; Port the port on each.
	Targets []string
	Port    int
	// Every is the time between two requests to one target; Timeout
	// bounds one request, connecting included.
	Every, Timeout time.Duration
	// LateAfter: a request sent this much later than its turn is
	// reported (a "late" line), which shows whether this process itself
	// was held up. Zero: Every.
	LateAfter time.Duration
	// Persistent: each target's requests go one after another over one
	// connection kept open (HTTP keep-alive), and the next turn after a
	// failure connects anew (a "conn" line each time). It asks whether an
	// established connection outlives what happens meanwhile, such as an
	// address moving to another node, which a new connection per request
	// almost never straddles.
	Persistent bool
	// Dial connects (tests); nil: net.Dialer.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// The lines Run writes, one per request, fields separated by spaces:
//
//	ok   TARGET SENT_UNIX_NANO
//	fail TARGET SENT_UNIX_NANO MESSAGE...
//	late TARGET DUE_UNIX_NANO LATE_NANO
//	conn TARGET CONNECTED_UNIX_NANO       (Persistent: a connection opened)
const (
	LineOK   = "ok"
	LineFail = "fail"
	LineLate = "late"
	LineConn = "conn"
)

// Line is one parsed line of Run's output.
type Line struct {
	Kind, Target string
	At           time.Time
	Late         time.Duration // LineLate only
	Message      string        // LineFail only
}

// ParseLine reads one line of Run's output.
func ParseLine(s string) (Line, error) {
	f := strings.SplitN(s, " ", 4)
	if len(f) < 3 {
		return Line{}, fmt.Errorf("prober line %q: too few fields", s)
	}
	ns, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return Line{}, fmt.Errorf("prober line %q: time: %w", s, err)
	}
	l := Line{Kind: f[0], Target: f[1], At: time.Unix(0, ns)}
	switch l.Kind {
	case LineOK, LineConn:
	case LineFail:
		if len(f) == 4 {
			l.Message = f[3]
		}
	case LineLate:
		if len(f) != 4 {
			return Line{}, fmt.Errorf("prober line %q: no lateness", s)
		}
		late, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return Line{}, fmt.Errorf("prober line %q: lateness: %w", s, err)
		}
		l.Late = time.Duration(late)
	default:
		return Line{}, fmt.Errorf("prober line %q: unknown kind %q", s, l.Kind)
	}
	return l, nil
}

// Run probes every target until ctx ends, then waits for the requests in
// flight and returns. Lines go to out as they happen.
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	if len(cfg.Targets) == 0 || cfg.Port <= 0 || cfg.Every <= 0 || cfg.Timeout <= 0 {
		return errors.New("prober: targets, a port, the rate and the timeout are needed")
	}
	for _, t := range cfg.Targets {
		if net.ParseIP(t) == nil {
			return fmt.Errorf("prober: target %q is not an IP address", t)
		}
	}
	if cfg.LateAfter <= 0 {
		cfg.LateAfter = cfg.Every
	}
	if cfg.Dial == nil {
		d := &net.Dialer{}
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	w := &lineWriter{w: bufio.NewWriter(out)}
	var wg sync.WaitGroup
	for _, t := range cfg.Targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if cfg.Persistent {
				probeKept(ctx, cfg, t, w)
				return
			}
			probe(ctx, cfg, t, w, &wg)
		}()
	}
	wg.Wait()
	return w.err
}

// turns paces one target's requests: each call of next waits for the
// target's next turn, writes a "late" line when it came more than
// LateAfter after it was due, and returns when it came (false once ctx
// ends). A late turn is not made up for with a burst.
type turns struct {
	cfg    Config
	target string
	w      *lineWriter
	due    time.Time
	timer  *time.Timer
}

func newTurns(cfg Config, target string, w *lineWriter) *turns {
	return &turns{cfg: cfg, target: target, w: w, due: time.Now(), timer: time.NewTimer(0)}
}

func (t *turns) next(ctx context.Context) (time.Time, bool) {
	select {
	case <-ctx.Done():
		t.timer.Stop()
		return time.Time{}, false
	case <-t.timer.C:
	}
	now := time.Now()
	if late := now.Sub(t.due); late > t.cfg.LateAfter {
		t.w.line(LineLate, t.target, t.due, strconv.FormatInt(int64(late), 10))
	}
	t.due = t.due.Add(t.cfg.Every)
	if d := time.Since(t.due); d >= 0 {
		t.due = t.due.Add(d.Truncate(t.cfg.Every) + t.cfg.Every)
	}
	t.timer.Reset(time.Until(t.due))
	return now, true
}

// probe sends one target's requests, each on its turn and in a goroutine
// of its own, so a slow answer delays no other request.
func probe(ctx context.Context, cfg Config, target string, w *lineWriter, wg *sync.WaitGroup) {
	addr := net.JoinHostPort(target, strconv.Itoa(cfg.Port))
	tt := newTurns(cfg, target, w)
	for {
		now, ok := tt.next(ctx)
		if !ok {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := request(cfg, addr, target, now)
			if ok {
				w.line(LineOK, target, now, "")
			} else {
				w.line(LineFail, target, now, oneLine(err))
			}
		}()
	}
}

// probeKept sends one target's requests over one kept connection: each
// waits for the one before, so a turn that comes while a request is
// still out is late (a "late" line), not sent beside it.
func probeKept(ctx context.Context, cfg Config, target string, w *lineWriter) {
	addr := net.JoinHostPort(target, strconv.Itoa(cfg.Port))
	var c net.Conn
	var br *bufio.Reader
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	tt := newTurns(cfg, target, w)
	for {
		now, ok := tt.next(ctx)
		if !ok {
			return
		}
		deadline := now.Add(cfg.Timeout)
		var err error
		if c == nil {
			dctx, cancel := context.WithDeadline(ctx, deadline)
			c, err = cfg.Dial(dctx, addr)
			cancel()
			if err == nil {
				br = bufio.NewReader(c)
				w.line(LineConn, target, time.Now(), "")
			}
		}
		answered := false
		if err == nil {
			answered, err = ask(c, br, target, deadline)
		}
		if answered {
			w.line(LineOK, target, now, "")
			continue
		}
		w.line(LineFail, target, now, oneLine(err))
		if c != nil {
			c.Close()
			c = nil
		}
	}
}

func request(cfg Config, addr, host string, sent time.Time) (bool, error) {
	deadline := sent.Add(cfg.Timeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	c, err := cfg.Dial(ctx, addr)
	if err != nil {
		return false, err
	}
	defer c.Close()
	return Ask(c, host, deadline)
}

func oneLine(err error) string {
	if err == nil {
		return "no error"
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}

// lineWriter writes whole lines from many goroutines and flushes each.
type lineWriter struct {
	mu  sync.Mutex
	w   *bufio.Writer
	err error
}

func (l *lineWriter) line(kind, target string, at time.Time, rest string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	s := kind + " " + target + " " + strconv.FormatInt(at.UnixNano(), 10)
	if rest != "" {
		s += " " + rest
	}
	if _, err := l.w.WriteString(s + "\n"); err != nil {
		l.err = err
		return
	}
	l.err = l.w.Flush()
}
