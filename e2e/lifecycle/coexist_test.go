package lifecycle

import (
	"strings"
	"time"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/netns"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// backendsWith lists the save tools whose output on the node has a line
// holding word.
func backendsWith(h *harness.T, n topology.Node, word string) []string {
	var out []string
	for _, tool := range harness.SaveTools {
		save, err := netns.Run(h.Ctx, n.Netns, tool)
		if err == nil && strings.Contains(save, word) {
			out = append(out, tool)
		}
	}
	return out
}

// checkSameBackend: on real nodes, herald's proxy writes its rules into
// the iptables backend kubelet writes its canaries to (herald picks the
// backend as kube-proxy does); the lab kubelet writes no rules.
func checkSameBackend(h *harness.T) {
	if !h.Lab.RealNodes {
		return
	}
	for _, n := range h.Layout.Nodes {
		kubelet, herald := backendsWith(h, n, "KUBE-KUBELET-CANARY"), backendsWith(h, n, "HERALD")
		h.T.Logf("%s: kubelet's canaries in %v, herald's rules in %v", n.Name, kubelet, herald)
		if len(kubelet) == 0 || strings.Join(kubelet, " ") != strings.Join(herald, " ") {
			h.T.Errorf("%s: kubelet's chains are in %v, herald's in %v: herald must use kubelet's backend", n.Name, kubelet, herald)
		}
	}
}

// hostPortYAML is a pod publishing the echo server on a host port through
// the CNI portmap plugin (real nodes): its chains are the CNI plugins'
// rules herald must leave alone.
const hostPortYAML = `apiVersion: v1
kind: Pod
metadata: {name: hostport-echo, namespace: default, labels: {app: hostport-echo}}
spec:
  nodeName: node1
  containers:
  - name: echo
    image: registry.k8s.io/echoserver:1.4
    ports: [{containerPort: 8080, hostPort: 18080, protocol: TCP}]
`

// startHostPort runs the host-port pod and waits until the LAN client
// reaches it on node1's address (real nodes only).
func startHostPort(h *harness.T) {
	h.Apply(hostPortYAML)
	h.Kubectl("wait", "--for=condition=Ready", "--timeout=120s", "pod/hostport-echo")
	checkHostPort(h)
}

func checkHostPort(h *harness.T) {
	url := "http://" + h.Layout.Nodes[0].IPv4.String() + ":18080/"
	h.Poll(30*time.Second, "the host port answering the LAN client", func() (bool, string) {
		page, err := harness.HTTPGetFrom(h.Layout.Client, url)
		return err == nil && strings.Contains(page, "CLIENT VALUES:"), strings.TrimSpace(page)
	})
}
