package status

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/herald-lb/herald/internal/lbapi"
)

// DrainedNode is a Node carrying herald drain's mark, or a value of it
// the speakers do not read.
type DrainedNode struct {
	Node string `json:"node"`
	// Problem is set when the mark's value is not one herald reads: the
	// node's speaker then keeps the drain state it had.
	Problem string `json:"problem,omitempty"`
}

// DrainedNodes reads the drain marks of the Nodes; a user without the
// right to list Nodes gets a warning, not a failure.
func DrainedNodes(ctx context.Context, kube kubernetes.Interface) ([]DrainedNode, string) {
	l, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Sprintf("listing Nodes: %v: nodes drained with herald drain are not shown", err)
	}
	var out []DrainedNode
	for i := range l.Items {
		drained, set, err := lbapi.NodeDrain(&l.Items[i])
		switch {
		case err != nil:
			out = append(out, DrainedNode{Node: l.Items[i].Name, Problem: err.Error()})
		case drained && set:
			out = append(out, DrainedNode{Node: l.Items[i].Name})
		}
	}
	slices.SortFunc(out, func(a, b DrainedNode) int { return strings.Compare(a.Node, b.Node) })
	return out, ""
}

// renderDrainedText lists the drained nodes after the Services.
func renderDrainedText(out io.Writer, nodes []DrainedNode) error {
	if len(nodes) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(out, "\nDrained nodes (herald drain; herald drain --undo NODE ends it):"); err != nil {
		return err
	}
	for _, n := range nodes {
		line := fmt.Sprintf("  %s: drained: its layer-2 addresses go to the other nodes; its BGP routes go out with GRACEFUL_SHUTDOWN, then are withdrawn", n.Node)
		if n.Problem != "" {
			line = fmt.Sprintf("  %s: %s; its speaker keeps the drain state it had", n.Node, n.Problem)
		}
		if _, err := fmt.Fprintln(out, line); err != nil {
			return err
		}
	}
	return nil
}
