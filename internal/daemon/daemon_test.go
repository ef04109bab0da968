package daemon

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConnectNamesTheComponent(t *testing.T) {
	cfg := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://192.0.2.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cl, err := Connect(path, "speaker", 7, 9)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cl.Config.UserAgent, "herald-speaker/") || cl.Config.QPS != 7 || cl.Config.Burst != 9 || cl.Kube == nil || cl.Dynamic == nil {
		t.Errorf("config %+v", cl.Config)
	}
	if _, err := Connect(filepath.Join(t.TempDir(), "absent"), "proxy", 1, 1); err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("a missing kubeconfig: %v", err)
	}
}

func TestServe(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stop, err := Serve(log, map[string]http.Handler{addr: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := Serve(log, map[string]http.Handler{addr: http.NotFoundHandler()}); err == nil {
		t.Error("a second server on a taken port started")
	}
	stop()
}

func TestRetryBacksOff(t *testing.T) {
	var waits []time.Duration
	err := Retry(context.Background(), time.Millisecond, 4*time.Millisecond, func(next time.Duration) bool {
		waits = append(waits, next)
		return len(waits) == 5
	})
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 4 * time.Millisecond, 4 * time.Millisecond}
	if err != nil || !slices.Equal(waits, want) {
		t.Errorf("waits %v (err %v), want %v", waits, err, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Retry(ctx, time.Hour, time.Hour, func(time.Duration) bool { return false }); err == nil {
		t.Error("Retry outlived its context")
	}
}
