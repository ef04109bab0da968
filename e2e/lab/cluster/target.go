package cluster

import (
	"context"
	"fmt"
	"strings"

	"github.com/herald-lb/herald/e2e/lab/kubectl"
	"github.com/herald-lb/herald/e2e/lab/kubelet"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// PodLookup answers where a pod runs: its node and whether it uses the
// node's network.
type PodLookup func(ctx context.Context, namespace, name string) (node string, hostNetwork bool, err error)

// Netns resolves an exec target to the network namespace it names:
//
//	node1 ... nodeN          a node
//	client, router, remote   the lab's other members
//	pod/NAME, pod/NS/NAME    a pod (namespace default unless given);
//	                         hostNetwork pods resolve to their node
func Netns(ctx context.Context, l topology.Layout, target string, lookup PodLookup) (string, error) {
	switch target {
	case "client":
		return l.Client, nil
	case "router":
		return l.Router, nil
	case "remote":
		return l.Remote, nil
	}
	if n, ok := l.Node(target); ok {
		return n.Netns, nil
	}
	rest, ok := strings.CutPrefix(target, "pod/")
	if !ok {
		return "", fmt.Errorf("exec target %q: want a node (%s), client, router, remote, or pod/[NAMESPACE/]NAME", target, nodeNames(l))
	}
	ns, name := "default", rest
	if a, b, ok := strings.Cut(rest, "/"); ok {
		ns, name = a, b
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("exec target %q: want pod/NAME or pod/NAMESPACE/NAME", target)
	}
	node, hostNet, err := lookup(ctx, ns, name)
	if err != nil {
		return "", fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	if hostNet {
		n, ok := l.Node(node)
		if !ok {
			return "", fmt.Errorf("pod %s/%s: runs on %q, which is not a lab node", ns, name, node)
		}
		return n.Netns, nil
	}
	if node == "" {
		return "", fmt.Errorf("pod %s/%s: not scheduled yet", ns, name)
	}
	return kubelet.PodNetnsName(l.Prefix, ns, name), nil
}

func nodeNames(l topology.Layout) string {
	if len(l.Nodes) == 1 {
		return l.Nodes[0].Name
	}
	return l.Nodes[0].Name + ".." + l.Nodes[len(l.Nodes)-1].Name
}

// KubectlPodLookup finds pods with kubectl.
func KubectlPodLookup(k *kubectl.Kubectl) PodLookup {
	return func(ctx context.Context, namespace, name string) (string, bool, error) {
		out, err := k.Output(ctx, "get", "pod", "-n", namespace, name, "-o", "jsonpath={.spec.nodeName} {.spec.hostNetwork}")
		if err != nil {
			return "", false, err
		}
		f := strings.Fields(out)
		if len(f) == 0 {
			return "", false, nil
		}
		return f[0], len(f) > 1 && f[1] == "true", nil
	}
}

// KubectlClient is a kubectl for the lab.
func (s *State) KubectlClient() *kubectl.Kubectl {
	return &kubectl.Kubectl{Path: s.KubectlPath, Kubeconfig: s.Kubeconfig}
}
