package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log sink the watcher's goroutine and the test share.
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

// watched is a proxy started from a --config file, with the command line
// it would read again, and its log.
type watched struct {
	p    *Proxy
	path string
	log  *syncBuffer
}

func newWatched(t *testing.T, body string) *watched {
	t.Helper()
	t.Setenv(EnvClusterCIDR, "")
	path := writeConfig(t, body)
	args := []string{"--hostname-override=n", "--min-sync-period=2s", "--config", path}
	o, err := ParseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	w := &watched{p: New(o), path: path, log: &syncBuffer{}}
	w.p.configPoll = 5 * time.Millisecond
	w.p.SetReread(func() (Options, error) { return ParseFlags(args, io.Discard) })
	return w
}

func (w *watched) write(t *testing.T, body string) {
	t.Helper()
	text := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n" + body
	// As the kubelet updates a ConfigMap volume: a new file moved over.
	tmp := w.path + ".new"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, w.path); err != nil {
		t.Fatal(err)
	}
}

// runFake runs the proxy's restart loop with a fake run that records the
// options of each start and blocks until its context ends.
func (w *watched) runFake(ctx context.Context) (starts chan Options, done chan error) {
	starts, done = make(chan Options, 8), make(chan error, 1)
	log := slog.New(slog.NewTextHandler(w.log, nil))
	go func() {
		done <- w.p.runRestarting(ctx, log, func(ctx context.Context, _ *slog.Logger) error {
			starts <- w.p.o
			<-ctx.Done()
			return nil
		})
	}()
	return starts, done
}

func nextStart(t *testing.T, starts chan Options, what string) Options {
	t.Helper()
	select {
	case o := <-starts:
		return o
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the proxy did not start", what)
		return Options{}
	}
}

func noStart(t *testing.T, starts chan Options, what string) {
	t.Helper()
	select {
	case o := <-starts:
		t.Fatalf("%s: the proxy started again, with %+v", what, o)
	case <-time.After(100 * time.Millisecond): // 20 polls
	}
}

// waitLog waits for the watcher to have logged want (it polls every 5 ms
// here).
func (w *watched) waitLog(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(w.log.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log:\n%s", want, w.log.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestConfigChangeRestartsTheProxy: a new --config (syncPeriod) starts the
// proxy again with the new value, the command line still winning; a
// change the proxy does not use (a comment), a file that does not parse
// and a field herald refuses leave the running proxy alone, each logged;
// the next good file is taken up after them.
func TestConfigChangeRestartsTheProxy(t *testing.T) {
	w := newWatched(t, "iptables: {syncPeriod: 30s}\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	starts, done := w.runFake(ctx)
	if o := nextStart(t, starts, "start"); o.SyncPeriod != 30*time.Second || o.MinSyncPeriod != 2*time.Second {
		t.Fatalf("first start: sync %v, min %v", o.SyncPeriod, o.MinSyncPeriod)
	}

	w.write(t, "iptables: {syncPeriod: 30s}\n# a comment only\n")
	w.waitLog(t, "nothing the proxy uses did")
	noStart(t, starts, "a comment")

	w.write(t, "iptables: {syncPeriod: 30s\n")
	w.waitLog(t, "the new contents cannot be used")
	noStart(t, starts, "malformed YAML")

	w.write(t, "mode: ipvs\n")
	w.waitLog(t, "mode: herald programs iptables or nftables, not IPVS")
	noStart(t, starts, "a refused field")
	if n := strings.Count(w.log.String(), "cannot be used"); n != 2 {
		t.Errorf("%d errors logged for two bad files, want one each:\n%s", n, w.log.String())
	}

	w.write(t, "iptables: {syncPeriod: 45s, minSyncPeriod: 5s}\n")
	o := nextStart(t, starts, "after syncPeriod 45s")
	if o.SyncPeriod != 45*time.Second || o.MinSyncPeriod != 2*time.Second {
		t.Errorf("restarted with sync %v, min %v; want 45s and the command line's 2s", o.SyncPeriod, o.MinSyncPeriod)
	}
	w.waitLog(t, "restarting the proxy with it")

	// The restarted proxy watches the file too.
	w.write(t, "iptables: {syncPeriod: 50s}\n")
	if o := nextStart(t, starts, "after syncPeriod 50s"); o.SyncPeriod != 50*time.Second {
		t.Errorf("second restart with sync %v, want 50s", o.SyncPeriod)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v at the end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// TestConfigUnreadableKeepsRunning: a file that is gone (a ConfigMap
// volume between two symlinks, or removed) is logged once and changes
// nothing; its return with new contents is taken up.
func TestConfigUnreadableKeepsRunning(t *testing.T) {
	w := newWatched(t, "iptables: {syncPeriod: 30s}\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	starts, _ := w.runFake(ctx)
	nextStart(t, starts, "start")
	if err := os.Remove(w.path); err != nil {
		t.Fatal(err)
	}
	w.waitLog(t, "cannot read the file")
	noStart(t, starts, "file removed")
	if n := strings.Count(w.log.String(), "cannot read the file"); n != 1 {
		t.Errorf("the missing file logged %d times over 20 polls, want once", n)
	}
	w.write(t, "iptables: {syncPeriod: 40s}\n")
	if o := nextStart(t, starts, "file back"); o.SyncPeriod != 40*time.Second {
		t.Errorf("restarted with sync %v, want 40s", o.SyncPeriod)
	}
}

// TestConfigReadOnceWithoutReread: without SetReread (or --config) the
// proxy never reads the file again.
func TestConfigReadOnceWithoutReread(t *testing.T) {
	w := newWatched(t, "iptables: {syncPeriod: 30s}\n")
	w.p.SetReread(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	starts, _ := w.runFake(ctx)
	nextStart(t, starts, "start")
	w.write(t, "iptables: {syncPeriod: 45s}\n")
	noStart(t, starts, "no reread")
	if w.log.String() != "" {
		t.Errorf("logged without a reread:\n%s", w.log.String())
	}
}
