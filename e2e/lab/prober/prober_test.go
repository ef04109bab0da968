package prober

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRun probes a served and a silent target on loopback: every request
// to the first is "ok", every one to the second "fail", at the rate asked.
func TestRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "CLIENT VALUES:\nclient_address=%s\n", r.RemoteAddr)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	// 127.0.0.2 gets the same port and nobody listens: every dial there
	// is refused, as a reset would.
	var out strings.Builder
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 520*time.Millisecond)
	defer cancel()
	go func() {
		done <- Run(ctx, Config{Targets: []string{"127.0.0.1", "127.0.0.2"}, Port: port, Every: 50 * time.Millisecond, Timeout: time.Second}, pw)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	counts := map[string]int{}
	for sc.Scan() {
		l, err := ParseLine(sc.Text())
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString(sc.Text() + "\n")
		counts[l.Kind+" "+l.Target]++
		if l.Kind == LineFail && l.Message == "" {
			t.Errorf("a failure without its error: %q", sc.Text())
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// About 11 turns in 520 ms at 50 ms; allow a loaded machine its slack.
	if n := counts["ok 127.0.0.1"]; n < 6 || n > 12 || counts["fail 127.0.0.1"] != 0 {
		t.Errorf("served target: %v\n%s", counts, out.String())
	}
	if n := counts["fail 127.0.0.2"]; n < 6 || n > 12 || counts["ok 127.0.0.2"] != 0 {
		t.Errorf("silent target: %v\n%s", counts, out.String())
	}
}

func TestParseLine(t *testing.T) {
	for _, good := range []string{"ok 192.0.2.1 1700000000000000000", "fail 2001:db8::1 1700000000000000000 dial tcp: i/o timeout", "late 192.0.2.1 1700000000000000000 250000000"} {
		if _, err := ParseLine(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	l, _ := ParseLine("late 192.0.2.1 1700000000000000000 250000000")
	if l.Late != 250*time.Millisecond {
		t.Errorf("late: %v", l.Late)
	}
	for _, bad := range []string{"", "ok 192.0.2.1", "ok 192.0.2.1 x", "late 192.0.2.1 1", "what 192.0.2.1 1"} {
		if _, err := ParseLine(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	for _, cfg := range []Config{{}, {Targets: []string{"web"}, Port: 80, Every: time.Second, Timeout: time.Second}} {
		if err := Run(context.Background(), cfg, io.Discard); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// TestRunPersistent keeps one connection for every request, and after the
// server drops it (as a node without the flow's state would reset it)
// reports that request failed and connects anew on the next turn.
func TestRunPersistent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	conns, served := map[string]bool{}, 0
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conns[r.RemoteAddr] = true
		served++
		drop := served == 4
		mu.Unlock()
		if drop {
			// Close without an answer: the client sees its request fail.
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			c.Close()
			return
		}
		fmt.Fprintf(w, "CLIENT VALUES:\nclient_address=%s\n", r.RemoteAddr)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	var lines []Line
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 420*time.Millisecond)
	defer cancel()
	go func() {
		done <- Run(ctx, Config{Targets: []string{"127.0.0.1"}, Port: port, Every: 50 * time.Millisecond, Timeout: time.Second, Persistent: true}, pw)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		l, err := ParseLine(sc.Text())
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, l := range lines {
		kinds = append(kinds, l.Kind)
	}
	got := strings.Join(kinds, " ")
	// conn ok ok ok fail conn ok ...: the fourth request was dropped.
	if !strings.HasPrefix(got, "conn ok ok ok fail conn ok") {
		t.Errorf("lines %q, want them to start %q", got, "conn ok ok ok fail conn ok")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) != 2 {
		t.Errorf("the server saw %d connections, want 2 (one before the drop, one after)", len(conns))
	}
}
