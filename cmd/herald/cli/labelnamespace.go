package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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

const labelNamespaceDescription = `Sets the labels pod-security.kubernetes.io/enforce, audit and warn of the
namespace to LEVEL, leaving its other labels alone, and prints what it
changed. The Helm chart runs it before install, upgrade and rollback,
because helm install --create-namespace makes a namespace without labels
and the speaker's pods need the privileged level (docs/install.md, "Pod
Security").`

// labelNamespaceFlags defines the flags; podNamespace ($POD_NAMESPACE)
// is the default namespace, as the chart's hook runs it. complete checks
// them once parsed.
func labelNamespaceFlags(fs *pflag.FlagSet, o *labelNamespaceOptions, podNamespace string) (complete func(pos []string) error) {
	fs.StringVarP(&o.namespace, "namespace", "n", podNamespace, "the namespace to label (default: $POD_NAMESPACE)")
	level := fs.String("pod-security", "", "the `level` to set for enforce, audit and warn: privileged, baseline or restricted")
	o.cluster.Register(fs)
	return func(pos []string) error {
		if len(pos) > 0 {
			return fmt.Errorf("unexpected arguments %q", pos)
		}
		if *level == "" {
			return errors.New("--pod-security is required")
		}
		var err error
		if o.level, err = podsecurity.ParseLevel(*level); err != nil {
			return fmt.Errorf("--pod-security: %w", err)
		}
		if o.namespace == "" {
			return errors.New("--namespace is required (or $POD_NAMESPACE)")
		}
		return nil
	}
}

// parseLabelNamespace reads the command line.
func parseLabelNamespace(args []string, out io.Writer, podNamespace string) (labelNamespaceOptions, error) {
	var o labelNamespaceOptions
	err := flagusage.ParseArgs("label-namespace", args, out, func(fs *pflag.FlagSet) func([]string) error {
		return labelNamespaceFlags(fs, &o, podNamespace)
	})
	return o, err
}

func labelNamespaceCommand() *cobra.Command {
	c := command("label-namespace --pod-security LEVEL [-n NAMESPACE] [flags]",
		"set a namespace's Pod Security labels (the Helm chart's install hook runs it)", labelNamespaceDescription, cobra.ArbitraryArgs)
	var o labelNamespaceOptions
	complete := labelNamespaceFlags(c.Flags(), &o, os.Getenv("POD_NAMESPACE"))
	c.RunE = clusterRun("label-namespace", complete, func() kubeclient.Flags { return o.cluster },
		func(ctx context.Context, cs kubernetes.Interface, out, errOut io.Writer) int {
			return labelNamespaceMain(ctx, cs.CoreV1().Namespaces(), o, out, errOut)
		})
	return c
}

// clusterRun is the run of a command a user or a hook runs once against
// the cluster its flags select, until it is done or SIGINT or SIGTERM:
// complete checks the arguments (exit 2), then exit 1 without a client,
// else main's status. A command that hangs holds up whoever waits for it
// (helm install until its --timeout): its client gives up on an API
// server that does not answer.
func clusterRun(name string, complete func(pos []string) error, cluster func() kubeclient.Flags,
	main func(ctx context.Context, cs kubernetes.Interface, out, errOut io.Writer) int) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		if err := complete(args); err != nil {
			return err
		}
		errOut := c.ErrOrStderr()
		rc, err := cluster().Config()
		if err != nil {
			fmt.Fprintf(errOut, "herald %s: %v\n", name, err)
			return exitCode(1)
		}
		rc.Timeout = 30 * time.Second
		rc.UserAgent = "herald-" + name + "/" + version.Version
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			fmt.Fprintf(errOut, "herald %s: %v\n", name, err)
			return exitCode(1)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if code := main(ctx, cs, c.OutOrStdout(), errOut); code != 0 {
			return exitCode(code)
		}
		return nil
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
