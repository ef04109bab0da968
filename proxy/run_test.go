package proxy

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

// A second proxy on a node must not start: its health and metrics ports
// are taken, and the error says why.
func TestServeRefusesASecondProxy(t *testing.T) {
	first, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	stop, err := serve(log, map[string]http.Handler{first.Addr().String(): http.NotFoundHandler()})
	if err == nil {
		stop()
		t.Fatal("a second server started on a port in use")
	}
	if !strings.Contains(err.Error(), "another service proxy") || !strings.Contains(err.Error(), "run one per node") {
		t.Errorf("error %q does not say another proxy runs", err)
	}
}
