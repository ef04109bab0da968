package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/herald-lb/herald/internal/flagusage"
	"github.com/herald-lb/herald/internal/kubeclient"
	"github.com/herald-lb/herald/internal/podsecurity"
	"github.com/herald-lb/herald/internal/version"
)

type labelNamespaceOptions struct {
	namespace string
	level     podsecurity.Level
	cluster   kubeclient.Flags
}

// parseLabelNamespace reads the flags; podNamespace ($POD_NAMESPACE) is
// the default namespace, as the chart's hook runs it.
func parseLabelNamespace(args []string, out io.Writer, podNamespace string) (labelNamespaceOptions, error) {
	var o labelNamespaceOptions
	fs := flag.NewFlagSet("label-namespace", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.namespace, "namespace", podNamespace, "the namespace to label (default: $POD_NAMESPACE)")
	level := fs.String("pod-security", "", "the level to set for enforce, audit and warn: privileged, baseline or restricted")
	o.cluster.Register(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: herald label-namespace --pod-security LEVEL [--namespace NS]

Sets the labels pod-security.kubernetes.io/enforce, audit and warn of the
namespace to LEVEL, leaving its other labels alone, and prints what it
changed. The Helm chart runs it before install, upgrade and rollback,
because helm install --create-namespace makes a namespace without labels
and the speaker's pods need the privileged level (docs/install.md, "Pod
Security").`)
		flagusage.PrintDefaults(fs.Output(), fs)
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *level == "" {
		return o, errors.New("--pod-security is required")
	}
	var err error
	if o.level, err = podsecurity.ParseLevel(*level); err != nil {
		return o, fmt.Errorf("--pod-security: %w", err)
	}
	if o.namespace == "" {
		return o, errors.New("--namespace is required (or $POD_NAMESPACE)")
	}
	return o, nil
}

var runLabelNamespace = clusterCommand("label-namespace",
	func(args []string, out io.Writer) (labelNamespaceOptions, error) {
		return parseLabelNamespace(args, out, os.Getenv("POD_NAMESPACE"))
	},
	func(o labelNamespaceOptions) kubeclient.Flags { return o.cluster },
	func(ctx context.Context, cs kubernetes.Interface, o labelNamespaceOptions) int {
		return labelNamespaceMain(ctx, cs.CoreV1().Namespaces(), o, os.Stdout, os.Stderr)
	})

// clusterCommand is a command a user or a hook runs once against the
// cluster its flags select, until it is done or SIGINT or SIGTERM: exit
// 0 on -h, 2 on bad flags, 1 without a client, else main's status. A
// command that hangs holds up whoever waits for it (helm install until
// its --timeout): its client gives up on an API server that does not
// answer.
func clusterCommand[O any](name string, parse func([]string, io.Writer) (O, error), cluster func(O) kubeclient.Flags,
	main func(context.Context, kubernetes.Interface, O) int) func([]string) int {
	return func(args []string) int {
		o, err := parse(args, flagusage.Output(args))
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "herald %s: %v\n", name, err)
			return 2
		}
		rc, err := cluster(o).Config()
		if err != nil {
			fmt.Fprintf(os.Stderr, "herald %s: %v\n", name, err)
			return 1
		}
		rc.Timeout = 30 * time.Second
		rc.UserAgent = "herald-" + name + "/" + version.Version
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			fmt.Fprintf(os.Stderr, "herald %s: %v\n", name, err)
			return 1
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return main(ctx, cs, o)
	}
}

// labelNamespaceMain labels the namespace, prints each change to out
// (or that there was none) and returns the exit status.
func labelNamespaceMain(ctx context.Context, namespaces typedcorev1.NamespaceInterface, o labelNamespaceOptions, out, errOut io.Writer) int {
	changes, err := podsecurity.Apply(ctx, namespaces, o.namespace, o.level)
	if err != nil {
		fmt.Fprintf(errOut, "herald label-namespace: %v\n", err)
		return 1
	}
	if len(changes) == 0 {
		fmt.Fprintf(out, "namespace %s: Pod Security enforce, audit and warn are %s already\n", o.namespace, o.level)
		return 0
	}
	for _, c := range changes {
		fmt.Fprintf(out, "namespace %s: %s\n", o.namespace, c)
	}
	return 0
}
