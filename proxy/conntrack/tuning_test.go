package conntrack

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestTuningPlan(t *testing.T) {
	// kube-proxy's defaults on 2 CPUs: 2 x 32768 is below the minimum.
	got := DefaultTuning().Plan(2)
	want := []Setting{{SysctlMax, 131072}, {SysctlTCPEstablishedTimeout, 86400}, {SysctlTCPCloseWaitTimeout, 3600}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults on 2 CPUs: %v, want %v", got, want)
	}
	// 8 CPUs: above the minimum.
	if got := DefaultTuning().Plan(8); got[0] != (Setting{SysctlMax, 262144}) {
		t.Errorf("defaults on 8 CPUs: %v", got[0])
	}
	// Zeros leave the node's settings; be-liberal and UDP when asked.
	tu := Tuning{Min: 1 << 20, TCPBeLiberal: true, UDPTimeout: 30 * time.Second, UDPStreamTimeout: 2 * time.Minute}
	want = []Setting{{SysctlTCPBeLiberal, 1}, {SysctlUDPTimeout, 30}, {SysctlUDPStreamTimeout, 120}}
	if got := tu.Plan(4); !reflect.DeepEqual(got, want) {
		t.Errorf("max-per-core 0 (min ignored), be-liberal, UDP: %v, want %v", got, want)
	}
}

func TestTuningValidate(t *testing.T) {
	if err := DefaultTuning().Validate(); err != nil {
		t.Fatal(err)
	}
	err := Tuning{MaxPerCore: -1, TCPCloseWaitTimeout: 500 * time.Millisecond, UDPTimeout: -time.Second}.Validate()
	for _, want := range []string{"--conntrack-max-per-core: must not be negative", "--conntrack-tcp-timeout-close-wait: the kernel counts whole seconds", "--conntrack-udp-timeout: must not be negative"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

func TestApply(t *testing.T) {
	// The host's namespace: everything writable, the hash size raised
	// to a quarter of the table.
	s := &FakeSysctls{Values: map[string]int{SysctlMax: 65536, HashSize: 16384, SysctlTCPEstablishedTimeout: 432000, SysctlTCPCloseWaitTimeout: 3600}}
	out := Apply(DefaultTuning(), 2, s)
	wantWrites := []Setting{{SysctlMax, 131072}, {HashSize, 32768}, {SysctlTCPEstablishedTimeout, 86400}}
	if !reflect.DeepEqual(s.Writes, wantWrites) {
		t.Errorf("writes %v, want %v (close-wait was right already)", s.Writes, wantWrites)
	}
	if len(out) != 4 || out[3].Changed || out[3].Err != nil || out[0].Was != 65536 {
		t.Errorf("outcomes %+v", out)
	}

	// Another network namespace (a container's, the lab's nodes): the
	// table's size is the host's and cannot be written; the timeouts
	// are the namespace's own and are.
	s = &FakeSysctls{
		Values:   map[string]int{SysctlMax: 65536, HashSize: 16384, SysctlTCPEstablishedTimeout: 432000, SysctlTCPCloseWaitTimeout: 60},
		ReadOnly: map[string]bool{SysctlMax: true, HashSize: true},
	}
	out = Apply(DefaultTuning(), 2, s)
	if len(out) != 3 || out[0].Err == nil || out[0].Changed {
		t.Fatalf("a read-only table size: %+v", out)
	}
	if s.Values[SysctlTCPCloseWaitTimeout] != 3600 || s.Values[SysctlTCPEstablishedTimeout] != 86400 || s.Values[SysctlMax] != 65536 {
		t.Errorf("values after: %v", s.Values)
	}
}

func TestFilesSysctls(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, SysctlTCPCloseWaitTimeout)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("60\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := Files{Root: root}
	if v, err := f.Read(SysctlTCPCloseWaitTimeout); err != nil || v != 60 {
		t.Fatalf("read %d, %v", v, err)
	}
	if err := f.Write(SysctlTCPCloseWaitTimeout, 3600); err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Read(SysctlTCPCloseWaitTimeout); v != 3600 {
		t.Errorf("after the write: %d", v)
	}
	if _, err := f.Read(SysctlMax); err == nil {
		t.Error("a missing setting read without error")
	}
	if err := f.Write(SysctlMax, 1); err == nil || !strings.Contains(err.Error(), "read-only /proc/sys") {
		t.Errorf("writing a missing setting: %v", err)
	}
}
