package labbin

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestEchoServerBinary builds the echoserver program and talks to it over
// TCP, as a pod's client would.
func TestEchoServerBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: builds a program")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bins, err := Ensure(ctx, Options{ModuleDir: "../..", BinDir: t.TempDir(), Log: t.Output(), Only: []string{EchoServer}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bins.Path(EchoServer), "-listen", addr)
	cmd.Stdout, cmd.Stderr = t.Output(), t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	var page string
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/hello")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			page = string(b)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{"CLIENT VALUES:", "client_address=127.0.0.1\n", "real path=/hello\n"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	// SIGTERM stops it cleanly (exit status 0), as the kubelet expects.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("echoserver exited with %v after SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(fmt.Errorf("echoserver still running 10s after SIGTERM"))
	}
}

func TestDefaultBinDir(t *testing.T) {
	own := t.TempDir()
	if err := os.MkdirAll(filepath.Join(own, "_cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, want := DefaultBinDir(own), filepath.Join(own, "_cache", "lab", "bin"); got != want {
		t.Errorf("a checkout with its own cache: %s, want %s", got, want)
	}
	// Two checkouts sharing the first one's cache get a directory each.
	a, b := t.TempDir(), t.TempDir()
	for _, m := range []string{a, b} {
		if err := os.Symlink(filepath.Join(own, "_cache"), filepath.Join(m, "_cache")); err != nil {
			t.Fatal(err)
		}
	}
	da, db := DefaultBinDir(a), DefaultBinDir(b)
	if da == db || !strings.HasPrefix(da, filepath.Join(a, "_cache", "lab", "bin-")) {
		t.Errorf("two checkouts sharing a cache: %s and %s, want distinct bin-* directories", da, db)
	}
	if DefaultBinDir(a) != da {
		t.Error("not stable")
	}
}
