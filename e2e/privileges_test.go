package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/e2e/harness"
)

// TestSpeakerPrivileges: the speakers run as config/deploy says, not
// privileged, and the lab kubelet gives their processes exactly the
// capabilities the manifest adds (NET_ADMIN and NET_RAW: CapEff 0x3000),
// so every other e2e test of the speaker and the proxy shows that these
// two are enough. The proxy's metrics answer on the loopback only.
func TestSpeakerPrivileges(t *testing.T) {
	h := harness.Start(t)
	s := l2{h}
	pods := s.readySpeakers(2 * time.Minute)
	for node, p := range pods {
		c := p.Spec.Containers[0]
		if sc := c.SecurityContext; sc == nil || (sc.Privileged != nil && *sc.Privileged) {
			t.Errorf("%s: the speaker container is privileged or has no securityContext: %+v", node, sc)
		}
		if p.Spec.PriorityClassName != "system-node-critical" {
			t.Errorf("%s: priorityClassName %q", node, p.Spec.PriorityClassName)
		}
		pid := s.speakerPID(p)
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"CapEff:\t0000000000003000", "CapPrm:\t0000000000003000", "CapBnd:\t0000000000003000"} {
			if !strings.Contains(string(status), want) {
				t.Errorf("%s: speaker pid %d lacks %q:\n%s", node, pid, want, capLines(string(status)))
			}
		}
		t.Logf("%s: speaker pid %d: %s", node, pid, strings.Join(strings.Fields(capLines(string(status))), " "))
		n, _ := h.Layout.Node(node)
		if _, err := harness.HTTPGetFrom(n.Netns, "http://127.0.0.1:10249/proxyMode"); err != nil {
			t.Errorf("%s: the proxy's metrics do not answer on the loopback: %v", node, err)
		}
		if _, err := harness.HTTPGetFrom(n.Netns, "http://"+n.IPv4.String()+":10249/proxyMode"); err == nil {
			t.Errorf("%s: the proxy's metrics answer on the node's address %s; want the loopback only", node, n.IPv4)
		}
	}
}

func capLines(status string) string {
	var out []string
	for _, l := range strings.Split(status, "\n") {
		if strings.HasPrefix(l, "Cap") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
