package proxy

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/herald-lb/herald/proxy/conntrack"
)

func TestTuneConntrackLogs(t *testing.T) {
	// A container that is not privileged: nothing can be written, one
	// warning names every setting.
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	s := &conntrack.FakeSysctls{
		Values:   map[string]int{conntrack.SysctlMax: 65536, conntrack.HashSize: 16384, conntrack.SysctlTCPEstablishedTimeout: 432000, conntrack.SysctlTCPCloseWaitTimeout: 60},
		ReadOnly: map[string]bool{conntrack.SysctlMax: true, conntrack.SysctlTCPEstablishedTimeout: true, conntrack.SysctlTCPCloseWaitTimeout: true},
	}
	written, failed := tuneConntrack(conntrack.DefaultTuning(), s, log)
	out := buf.String()
	if written != 0 || failed != 3 || strings.Count(out, "level=WARN") != 1 {
		t.Fatalf("read-only: written %d, failed %d, log:\n%s", written, failed, out)
	}
	for _, want := range []string{"nf_conntrack_tcp_timeout_close_wait=3600", "nf_conntrack_max=", "privilegedInit"} {
		if !strings.Contains(out, want) {
			t.Errorf("the warning lacks %q:\n%s", want, out)
		}
	}

	// Privileged: each change logged once, the settings already right
	// not at all.
	buf.Reset()
	s = &conntrack.FakeSysctls{Values: map[string]int{conntrack.SysctlTCPEstablishedTimeout: 86400, conntrack.SysctlTCPCloseWaitTimeout: 60}}
	written, failed = tuneConntrack(conntrack.Tuning{TCPEstablishedTimeout: conntrack.DefaultTuning().TCPEstablishedTimeout, TCPCloseWaitTimeout: conntrack.DefaultTuning().TCPCloseWaitTimeout}, s, log)
	out = buf.String()
	if written != 1 || failed != 0 || strings.Count(out, "conntrack setting written") != 1 || !strings.Contains(out, "was=60 now=3600") {
		t.Errorf("writable: written %d, failed %d, log:\n%s", written, failed, out)
	}
}
