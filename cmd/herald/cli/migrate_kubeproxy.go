package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/herald-lb/herald/proxy/kubeproxyconfig"
)

// migrateKubeProxyMain translates kube-proxy's configuration: the Helm
// values (with the flags in a comment) to out, every field left out to
// report; it returns the exit status of herald migrate.
func migrateKubeProxyMain(ctx context.Context, o migrateOptions, out, report io.Writer) int {
	c, source, err := loadKubeProxy(ctx, o)
	if err != nil {
		fmt.Fprintf(report, "herald migrate: %v\n", err)
		return 2
	}
	tr := c.Translate()
	values, left, err := tr.Helm()
	if err != nil {
		fmt.Fprintf(report, "herald migrate: %v\n", err)
		return 2
	}
	var args []string
	for _, f := range tr.Flags {
		args = append(args, f.Arg())
	}
	flags := "herald proxy " + strings.Join(args, " ")
	if len(args) == 0 {
		flags = "herald proxy (no flags: every field is at a default herald shares)"
	}
	fmt.Fprintf(out, "# Values for herald's Helm chart, from kube-proxy's configuration in %s.\n# As herald proxy flags:\n#   %s\n%s", source, flags, values)

	warnings, errs := 0, 0
	for _, f := range tr.Findings {
		fmt.Fprintf(report, "%s: %s\n", source, f)
		if f.Severity == kubeproxyconfig.Error {
			errs++
		} else {
			warnings++
		}
	}
	for _, f := range left {
		fmt.Fprintf(report, "%s: note: %s: %s\n", source, f.Field, f.Message)
	}
	fmt.Fprintf(report, "%s translated; %s (a field left out) and %s (herald would serve traffic differently)",
		count(len(tr.Flags), "flag"), count(warnings, "warning"), count(errs, "error"))
	if warnings+errs > 0 {
		fmt.Fprint(report, ": read them before you use the output")
	}
	fmt.Fprintln(report)
	if warnings+errs > 0 {
		return 1
	}
	return 0
}

// loadKubeProxy reads the configuration from -f (a ConfigMap or a bare
// file; - for stdin) or from the cluster's ConfigMap.
func loadKubeProxy(ctx context.Context, o migrateOptions) (*kubeproxyconfig.Config, string, error) {
	if !o.fromCluster {
		path := o.files[0]
		var data []byte
		var err error
		if path == "-" {
			path = "stdin"
			data, err = io.ReadAll(os.Stdin)
		} else {
			data, err = os.ReadFile(path)
		}
		if err != nil {
			return nil, path, err
		}
		return kubeproxyconfig.ParseFileOrConfigMap(path, data)
	}
	rc, err := o.cluster.Config()
	if err != nil {
		return nil, "", err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, "", err
	}
	return kubeProxyFromCluster(ctx, cs, o.kubeProxyConfigMap)
}

// kubeProxyFromCluster reads the ConfigMap named "namespace/name".
func kubeProxyFromCluster(ctx context.Context, cs kubernetes.Interface, ref string) (*kubeproxyconfig.Config, string, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return nil, ref, fmt.Errorf("--kube-proxy-configmap: %q is not NAMESPACE/NAME", ref)
	}
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, ref, fmt.Errorf("reading kube-proxy's ConfigMap: %w", err)
	}
	source := "ConfigMap " + ref + ", key " + kubeproxyconfig.ConfigMapKey
	text, ok := cm.Data[kubeproxyconfig.ConfigMapKey]
	if !ok {
		return nil, source, fmt.Errorf("ConfigMap %s has no key %s", ref, kubeproxyconfig.ConfigMapKey)
	}
	c, err := kubeproxyconfig.Parse(source, []byte(text))
	return c, source, err
}

func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
