package proxy

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/proxy/conntrack"
)

func udpFlow(src, dst, replySrc string) conntrack.Flow {
	return conntrack.Flow{
		Proto:    conntrack.ProtoUDP,
		OrigSrc:  netip.MustParseAddrPort(src),
		OrigDst:  netip.MustParseAddrPort(dst),
		ReplySrc: netip.MustParseAddrPort(replySrc),
		ReplyDst: netip.MustParseAddrPort(src),
	}
}

func dnsService() *corev1.Service {
	s := clusterIPService("kube-system", "dns", "10.96.0.53", corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053})
	s.Spec.Type = corev1.ServiceTypeNodePort
	return s
}

func TestConntrackReconcile(t *testing.T) {
	e := newEnv(t)
	e.tracker.UpdateService(dnsService())
	e.tracker.UpdateSlice(slice("kube-system", "dns", "dns-1", 5353, "dns", corev1.ProtocolUDP,
		ep{"10.244.1.20", testNode, true}, ep{"10.244.2.20", otherNode, true}))
	e.addWebAndDB()

	current := udpFlow("10.244.1.5:40000", "10.96.0.53:53", "10.244.1.20:5353")
	gone := udpFlow("10.244.1.5:40001", "10.96.0.53:53", "10.244.3.99:5353")
	undnatted := udpFlow("10.244.1.5:40002", "10.96.0.53:53", "10.96.0.53:53")
	nodePortGone := udpFlow("203.0.113.7:40003", "192.0.2.10:30053", "10.244.3.99:5353")
	nodePortOK := udpFlow("203.0.113.7:40004", "192.0.2.10:30053", "10.244.2.20:5353")
	otherHost := udpFlow("10.244.1.5:40005", "198.51.100.1:30053", "198.51.100.1:30053")
	unrelated := udpFlow("10.244.1.5:40006", "10.96.0.99:53", "10.244.3.99:53")
	tcp := current
	tcp.Proto, tcp.ReplySrc = 6, netip.MustParseAddrPort("10.244.3.99:5353")
	e.ct.Add(current, gone, undnatted, nodePortGone, nodePortOK, otherHost, unrelated, tcp)

	res := e.sync(false)
	if res.ConntrackDeleted != 3 {
		t.Errorf("deleted %d, want 3", res.ConntrackDeleted)
	}
	if want := []conntrack.Flow{gone, undnatted, nodePortGone}; !slices.Equal(e.ct.Deleted, want) {
		t.Errorf("deleted %v\nwant %v", e.ct.Deleted, want)
	}
	if got := testutil.ToFloat64(e.m.conntrackDeleted); got != 3 {
		t.Errorf("metric %v", got)
	}

	// A change to a TCP Service does not dump the conntrack table.
	calls := e.ct.Calls
	e.tracker.UpdateSlice(slice("shop", "db", "db-1", 5432, "http", corev1.ProtocolTCP, ep{"10.244.2.31", otherNode, true}))
	e.sync(false)
	if e.ct.Calls != calls {
		t.Error("a TCP-only change reconciled conntrack")
	}

	// The local DNS pod goes: its flows go; the other pod's stay.
	e.tracker.UpdateSlice(slice("kube-system", "dns", "dns-1", 5353, "dns", corev1.ProtocolUDP, ep{"10.244.2.20", otherNode, true}))
	e.ct.Deleted = nil
	e.sync(false)
	if want := []conntrack.Flow{current}; !slices.Equal(e.ct.Deleted, want) {
		t.Errorf("after the pod went: deleted %v, want %v", e.ct.Deleted, want)
	}

	// No endpoints at all: every flow to the Service goes, so clients get
	// the REJECT instead of a black hole.
	e.tracker.UpdateSlice(slice("kube-system", "dns", "dns-1", 5353, "dns", corev1.ProtocolUDP))
	e.ct.Deleted = nil
	e.sync(false)
	if want := []conntrack.Flow{nodePortOK}; !slices.Equal(e.ct.Deleted, want) {
		t.Errorf("with no endpoints: deleted %v, want %v", e.ct.Deleted, want)
	}

	// Zero to one endpoint: a flow recorded while nothing answered
	// (without DNAT) would bypass the new rules.
	e.ct.Add(undnatted)
	e.tracker.UpdateSlice(slice("kube-system", "dns", "dns-1", 5353, "dns", corev1.ProtocolUDP, ep{"10.244.2.21", otherNode, true}))
	e.ct.Deleted = nil
	e.sync(false)
	if want := []conntrack.Flow{undnatted}; !slices.Equal(e.ct.Deleted, want) {
		t.Errorf("zero to one endpoint: deleted %v, want %v", e.ct.Deleted, want)
	}

	// The Service is deleted: DNATed flows to its addresses go, the rest
	// (not ours any more) stays.
	toNew := udpFlow("10.244.1.5:40010", "10.96.0.53:53", "10.244.2.21:5353")
	e.ct.Add(toNew, undnatted)
	e.tracker.DeleteService("kube-system", "dns")
	e.ct.Deleted = nil
	e.sync(false)
	if want := []conntrack.Flow{toNew}; !slices.Equal(e.ct.Deleted, want) {
		t.Errorf("after deletion: deleted %v, want %v", e.ct.Deleted, want)
	}
	if !slices.Contains(e.ct.Flows(), otherHost) || !slices.Contains(e.ct.Flows(), unrelated) || !slices.Contains(e.ct.Flows(), tcp) {
		t.Error("flows that are not the proxy's were deleted")
	}
}

func TestConntrackErrorDoesNotFailSync(t *testing.T) {
	e := newEnv(t)
	e.ct.Err = errors.New("netlink: operation not permitted")
	e.tracker.UpdateService(dnsService())
	res := e.sync(false)
	if res.Retry || res.Families[0].Err != nil || !e.s.Synced() {
		t.Errorf("a conntrack error failed the sync: %+v", res)
	}
}

// A failed cleanup is retried at the next sync, even one no UDP change
// asked for, and the flows of a Service deleted meanwhile are still found.
func TestConntrackFailedCleanupIsRetried(t *testing.T) {
	e := newEnv(t)
	e.tracker.UpdateService(dnsService())
	e.tracker.UpdateSlice(slice("kube-system", "dns", "dns-1", 5353, "dns", corev1.ProtocolUDP, ep{"10.244.1.20", testNode, true}))
	e.addWebAndDB()
	e.sync(false)

	toGone := udpFlow("10.244.1.5:40001", "10.96.0.53:53", "10.244.1.20:5353")
	e.ct.Add(toGone)
	e.tracker.DeleteService("kube-system", "dns")
	e.ct.Err = errors.New("netlink: interrupted")
	e.sync(false)
	if slices.Contains(e.ct.Deleted, toGone) {
		t.Fatal("the failing fake deleted the flow")
	}
	// The next sync is about a TCP Service only.
	e.ct.Err = nil
	e.tracker.UpdateSlice(slice("shop", "db", "db-1", 5432, "http", corev1.ProtocolTCP, ep{"10.244.2.31", otherNode, true}))
	e.sync(false)
	if !slices.Contains(e.ct.Deleted, toGone) {
		t.Errorf("the flow of the deleted Service was not cleaned on retry: deleted %v", e.ct.Deleted)
	}
	// Once it succeeded, TCP-only changes leave conntrack alone again.
	calls := e.ct.Calls
	e.tracker.UpdateSlice(slice("shop", "db", "db-1", 5432, "http", corev1.ProtocolTCP, ep{"10.244.2.32", otherNode, true}))
	e.sync(false)
	if e.ct.Calls != calls {
		t.Error("conntrack reconciled again after a successful retry")
	}
}
