package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"

	"github.com/herald-lb/herald/config/migrate"
	"github.com/herald-lb/herald/config/validate"
	"github.com/herald-lb/herald/internal/flagusage"
	"github.com/herald-lb/herald/internal/kubeclient"
)

// migrateOptions are `herald migrate`'s flags.
type migrateOptions struct {
	files            files
	fromCluster      bool
	metallbNamespace string
	namespace        string
	cluster          kubeclient.Flags
	// fromKubeProxy reads kube-proxy's configuration instead of
	// MetalLB's, from -f or the ConfigMap kubeProxyConfigMap.
	fromKubeProxy      bool
	kubeProxyConfigMap string
}

const migrateDescription = `Translates MetalLB's configuration (metallb.io custom resources, or its
legacy configuration of MetalLB 0.12: the ConfigMap, or the bare file
under its "config" key) into herald.io/v1beta1 YAML on standard output,
for kubectl apply. Only what MetalLB reads is translated: objects in
--metallb-namespace (or without a namespace), each name once. Standard
error reports every field that did not translate, naming the MetalLB
object and field, then what herald validate finds in the output. Exit
status: 0 when everything translated and validates (notes are changes
that keep MetalLB's behaviour), 1 when a warning or an error was reported
or no MetalLB configuration was found (nothing is written then), 2 when
the input could not be read.

With --from-kube-proxy, it reads kube-proxy's KubeProxyConfiguration
instead and writes values for herald's Helm chart, with the same settings
as herald proxy flags in a comment; standard error names every field that
does not translate and why. Exit status as above: 1 when a field is left
out or refused (an error: herald would serve traffic differently).`

func defaultMigrateOptions() migrateOptions {
	return migrateOptions{metallbNamespace: "metallb-system", namespace: "herald-system", kubeProxyConfigMap: "kube-system/kube-proxy"}
}

func migrateFlags(fs *pflag.FlagSet, o *migrateOptions) {
	fs.StringArrayVarP((*[]string)(&o.files), "filename", "f", nil, "YAML `file` with MetalLB's configuration (repeatable; - for stdin)")
	fs.BoolVar(&o.fromCluster, "from-cluster", false, "read MetalLB's configuration from the cluster (--metallb-namespace)")
	fs.StringVar(&o.metallbNamespace, "metallb-namespace", o.metallbNamespace, "namespace MetalLB reads its configuration from; with -f, objects of other namespaces are skipped")
	fs.StringVarP(&o.namespace, "namespace", "n", o.namespace, "the translated objects' namespace: herald's, where they go")
	fs.BoolVar(&o.fromKubeProxy, "from-kube-proxy", false, "translate kube-proxy's configuration instead (-f: kubeadm's kube-proxy ConfigMap or its config.conf; --from-cluster: --kube-proxy-configmap) into values of herald's Helm chart and herald proxy flags")
	fs.StringVar(&o.kubeProxyConfigMap, "kube-proxy-configmap", o.kubeProxyConfigMap, "NAMESPACE/NAME of kube-proxy's ConfigMap, for --from-kube-proxy --from-cluster")
	o.cluster.Register(fs)
}

// complete takes the files given as arguments and checks the options.
func (o *migrateOptions) complete(pos []string) error {
	o.files = append(o.files, pos...)
	switch {
	case len(o.files) == 0 && !o.fromCluster:
		return errors.New("give -f FILE or --from-cluster")
	case len(o.files) > 0 && o.fromCluster:
		return errors.New("give -f FILE or --from-cluster, not both")
	case o.fromKubeProxy && len(o.files) > 1:
		return errors.New("--from-kube-proxy reads one file")
	}
	return nil
}

func parseMigrate(args []string, out io.Writer) (migrateOptions, error) {
	o := defaultMigrateOptions()
	err := flagusage.ParseArgs("migrate", args, out, func(fs *pflag.FlagSet) func([]string) error { migrateFlags(fs, &o); return o.complete })
	return o, err
}

func migrateCommand() *cobra.Command {
	c := command("migrate -f FILE [-f FILE...] [flags]\nmigrate --from-cluster [flags]", "translate MetalLB's configuration into herald's",
		migrateDescription, cobra.ArbitraryArgs)
	o := defaultMigrateOptions()
	migrateFlags(c.Flags(), &o)
	c.RunE = func(c *cobra.Command, args []string) error {
		if err := o.complete(args); err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		code := 0
		if o.fromKubeProxy {
			code = migrateKubeProxyMain(ctx, o, c.OutOrStdout(), c.ErrOrStderr())
		} else {
			code = migrateMain(ctx, o, c.OutOrStdout(), c.ErrOrStderr())
		}
		if code != 0 {
			return exitCode(code)
		}
		return nil
	}
	return c
}

// migrateMain translates, writes the YAML to out and the report to
// report, and returns the exit status.
func migrateMain(ctx context.Context, o migrateOptions, out, report io.Writer) int {
	tr := migrate.New(migrate.Options{Namespace: o.namespace, MetalLBNamespace: o.metallbNamespace})
	input := "namespace " + o.metallbNamespace + " of the cluster"
	if o.fromCluster {
		rc, err := o.cluster.Config()
		if err != nil {
			fmt.Fprintf(report, "herald migrate: %v\n", err)
			return 2
		}
		dyn, err := dynamic.NewForConfig(rc)
		if err != nil {
			fmt.Fprintf(report, "herald migrate: %v\n", err)
			return 2
		}
		if err := tr.LoadCluster(ctx, dyn); err != nil {
			fmt.Fprintf(report, "herald migrate: %v\n", err)
			return 2
		}
	} else {
		input = strings.Join(o.files, ", ") + " (namespace " + o.metallbNamespace + ")"
	}
	for _, path := range o.files {
		if err := loadMigrateFile(tr, path); err != nil {
			fmt.Fprintf(report, "herald migrate: %v\n", err)
			return 2
		}
	}
	res := tr.Result()
	if res.Found == 0 || res.Objects() == 0 {
		// Nothing to apply: an empty output would let MetalLB be stopped
		// with no pool in place, and Services move to whatever pool
		// serves them.
		_ = migrate.Report(report, res, input)
		return 1
	}
	var yaml bytes.Buffer
	if err := migrate.Render(&yaml, res); err != nil {
		fmt.Fprintf(report, "herald migrate: %v\n", err)
		return 2
	}
	if _, err := out.Write(yaml.Bytes()); err != nil {
		fmt.Fprintf(report, "herald migrate: %v\n", err)
		return 2
	}
	if err := migrate.Report(report, res, input); err != nil {
		return 2
	}
	fmt.Fprintln(report, "herald validate on the output:")
	n, err := validate.Stream(indent{report}, o.namespace, "output", &yaml)
	if err != nil {
		fmt.Fprintf(report, "herald migrate: validating the output: %v\n", err)
		return 2
	}
	if n > 0 || len(res.Problems) > 0 {
		return 1
	}
	return 0
}

func loadMigrateFile(tr *migrate.Translator, path string) error {
	if path == "-" {
		return tr.Load("stdin", os.Stdin)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return tr.Load(path, f)
}

// indent prefixes every line written through it with two spaces.
type indent struct{ w io.Writer }

func (i indent) Write(p []byte) (int, error) {
	lines := bytes.SplitAfter(p, []byte("\n"))
	for _, l := range lines {
		if len(l) == 0 {
			continue
		}
		if _, err := i.w.Write(append([]byte("  "), l...)); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}
