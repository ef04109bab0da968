package kubelet

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestDownwardAPIAddresses: on a dual-stack node the plural status fields
// list every address, primary first, comma-separated, and the singular
// ones the primary, as the kubelet fills them.
func TestDownwardAPIAddresses(t *testing.T) {
	pod := &v1.Pod{}
	ips := podAddrs{pod: []string{"198.18.1.7", "2001:db8:1:1::7"}, host: []string{"198.51.100.11", "2001:db8:0:1::11"}}
	for path, want := range map[string]string{
		"status.podIP":   "198.18.1.7",
		"status.podIPs":  "198.18.1.7,2001:db8:1:1::7",
		"status.hostIP":  "198.51.100.11",
		"status.hostIPs": "198.51.100.11,2001:db8:0:1::11",
	} {
		got, err := fieldValue(pod, ips, path)
		if err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", path, got, err, want)
		}
	}
	// Before the sandbox there is no pod address: empty, not an error.
	if got, err := fieldValue(pod, podAddrs{}, "status.podIP"); got != "" || err != nil {
		t.Errorf("no sandbox: status.podIP = %q, %v", got, err)
	}
}
