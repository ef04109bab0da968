package harness

import (
	"testing"
	"time"
)

func TestTCPDumpLines(t *testing.T) {
	out := "reading from file x.pcap, link-type LINUX_SLL2\n" +
		"1796000000.250000 veth0 In ifindex 2 02:00:00:00:00:01 ethertype IPv4 (0x0800), length 80: 198.51.100.200.80 > 198.51.100.2.40000: Flags [R.]\n" +
		"\n" +
		"1796000009.000000 veth0 Out ifindex 2 02:00:00:00:00:02 ethertype IPv4 (0x0800), length 76: 198.51.100.2.40001 > 198.51.100.200.80: Flags [S]\n" +
		"2 packets captured\n"
	got := tcpdumpLines(out)
	if len(got) != 2 {
		t.Fatalf("read %d packets, want 2: %+v", len(got), got)
	}
	failed := []time.Time{time.Unix(1796000000, 0)}
	if !got[0].near(failed, 300*time.Millisecond) || got[1].near(failed, 300*time.Millisecond) {
		t.Errorf("near: the reset 250 ms after the failure is near, the SYN 9 s after is not: %v %v", got[0].near(failed, 300*time.Millisecond), got[1].near(failed, 300*time.Millisecond))
	}
	if want := "00:53:20.250000 veth0 In ifindex 2 02:00:00:00:00:01"; got[0].String()[:len(want)] != want {
		t.Errorf("String: %q, want it to start %q", got[0].String(), want)
	}
}

func TestSlogTime(t *testing.T) {
	at, ok := slogTime(`time=2026-11-27T18:36:17.123456789Z level=INFO msg="announcing" ip=198.51.100.210`)
	if !ok || at.Nanosecond() != 123456789 || at.Second() != 17 {
		t.Errorf("slogTime: %v %v", at, ok)
	}
	if _, ok := slogTime("I1127 18:36:17.123 klog line"); ok {
		t.Error("a line without time= has a time")
	}
}
