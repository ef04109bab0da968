package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/herald-lb/herald/internal/flagusage"
	"github.com/herald-lb/herald/internal/kubeclient"
	"github.com/herald-lb/herald/internal/lbapi"
)

type drainOptions struct {
	node    string
	undo    bool
	dryRun  bool
	cluster kubeclient.Flags
}

const drainDescription = `Marks the Node for maintenance with the annotation ` + lbapi.AnnotationDrain + `=` + lbapi.DrainValue + `
(--undo removes it). The node's speaker then hands the layer-2 addresses it
answers for over to the other nodes (they send gratuitous ARP and unsolicited
NA), stops winning new ones unless no other node may announce them, and sends
its BGP routes again with the GRACEFUL_SHUTDOWN community (65535:0), then
withdraws them after the speaker's --bgp-drain-wait (10s by default). Run it
before kubectl drain: a cordon alone moves nothing. Undo makes the node a
candidate again; the addresses the election gives it come back to it once.`

func drainFlags(fs *pflag.FlagSet, o *drainOptions) {
	fs.BoolVar(&o.undo, "undo", false, "remove the mark: the node announces and advertises again")
	fs.BoolVar(&o.dryRun, "dry-run", false, "say what would change and check the permission (a server-side dry run), change nothing")
	o.cluster.Register(fs)
}

// complete takes the node from the positional arguments.
func (o *drainOptions) complete(pos []string) error {
	switch len(pos) {
	case 0:
		return errors.New("which node? usage: herald drain NODE [--undo] [--dry-run]")
	case 1:
		o.node = pos[0]
	default:
		return fmt.Errorf("one node at a time, got %q", pos)
	}
	return nil
}

func parseDrain(args []string, out io.Writer) (drainOptions, error) {
	var o drainOptions
	err := flagusage.ParseArgs("drain", args, out, func(fs *pflag.FlagSet) func([]string) error { drainFlags(fs, &o); return o.complete })
	return o, err
}

func drainCommand() *cobra.Command {
	c := command("drain NODE [--undo] [--dry-run] [flags]", "hand a node's addresses and routes over before maintenance (--undo: take part again)",
		drainDescription, cobra.ArbitraryArgs)
	var o drainOptions
	drainFlags(c.Flags(), &o)
	c.RunE = clusterRun("drain", o.complete, func() kubeclient.Flags { return o.cluster },
		func(ctx context.Context, cs kubernetes.Interface, out, errOut io.Writer) int {
			return drainMain(ctx, cs.CoreV1().Nodes(), o, out, errOut)
		})
	return c
}

// drainMain sets or clears the mark on the Node, says what follows, and
// returns the exit status: 1 when the Node cannot be read or patched.
func drainMain(ctx context.Context, nodes typedcorev1.NodeInterface, o drainOptions, out, errOut io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(errOut, "herald drain: %s\n", explainAPIError(o.node, err))
		return 1
	}
	n, err := nodes.Get(ctx, o.node, metav1.GetOptions{})
	if err != nil {
		return fail(err)
	}
	drained, set, markErr := lbapi.NodeDrain(n)
	prefix := ""
	if o.dryRun {
		prefix = "(dry run) "
	}
	switch {
	case !o.undo && drained:
		fmt.Fprintf(out, "node %s is drained already (%s=%s): nothing to do\n", o.node, lbapi.AnnotationDrain, lbapi.DrainValue)
		return 0
	case o.undo && !set:
		fmt.Fprintf(out, "node %s is not drained (no %s annotation): nothing to do\n", o.node, lbapi.AnnotationDrain)
		return 0
	case markErr != nil:
		// The speaker ignores it and keeps the state it had; replacing
		// it is what the user asks for either way.
		fmt.Fprintf(errOut, "herald drain: replacing a value the speaker does not read: %v\n", markErr)
	}
	var value any = lbapi.DrainValue // JSON null removes the annotation
	if o.undo {
		value = nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{lbapi.AnnotationDrain: value}}})
	if err != nil {
		return fail(err)
	}
	opts := metav1.PatchOptions{FieldManager: "herald-drain"}
	if o.dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := nodes.Patch(ctx, o.node, types.MergePatchType, patch, opts); err != nil {
		return fail(err)
	}
	if o.undo {
		fmt.Fprintf(out, "%snode %s: %s removed\n", prefix, o.node, lbapi.AnnotationDrain)
		fmt.Fprintln(out, "  its speaker becomes a layer-2 candidate again (the addresses the election gives it come back to it, once each)")
		fmt.Fprintln(out, "  and advertises its BGP routes without GRACEFUL_SHUTDOWN again")
		return 0
	}
	fmt.Fprintf(out, "%snode %s: %s=%s set\n", prefix, o.node, lbapi.AnnotationDrain, lbapi.DrainValue)
	fmt.Fprintln(out, "  layer 2: its speaker hands the addresses it answers for to the other nodes at once,")
	fmt.Fprintln(out, "    keeping only those no other node may announce (externalTrafficPolicy Local with every endpoint here)")
	fmt.Fprintln(out, "  BGP: its routes go out again with GRACEFUL_SHUTDOWN (65535:0), and are withdrawn after the")
	fmt.Fprintln(out, "    speaker's --bgp-drain-wait (10s by default); the sessions stay up")
	fmt.Fprintf(out, "  then: herald status shows the node drained; kubectl drain %s --ignore-daemonsets; afterwards herald drain --undo %s\n", o.node, o.node)
	return 0
}

// explainAPIError turns the API errors a user can act on into a sentence
// naming the node.
func explainAPIError(node string, err error) string {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("node %q not found (kubectl get nodes lists them)", node)
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("no permission to read and patch node %s (herald drain needs get and patch on nodes, as kubectl drain does): %v", node, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Sprintf("the API server does not accept these credentials: %v", err)
	}
	return fmt.Sprintf("node %s: %v", node, err)
}
