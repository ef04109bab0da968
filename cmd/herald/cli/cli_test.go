package cli

import (
	"context"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/cmd/herald/cli/status"
	"github.com/herald-lb/herald/config/manifests"
	"github.com/herald-lb/herald/internal/version"
	"github.com/herald-lb/herald/proxy"
)

// runCLI runs the command line and returns its exit code and what it
// wrote to standard output and standard error.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut strings.Builder
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestExitCodes(t *testing.T) {
	t.Setenv("KUBECONFIG", "/nonexistent/kubeconfig")
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, 2},
		{[]string{"nope"}, 2},
		{[]string{"version"}, 0},
		{[]string{"--version"}, 0},
		{[]string{"proxy", "--bogus"}, 2},
		{[]string{"speaker", "-h"}, 0},
		{[]string{"controller", "--bogus"}, 2},
		{[]string{"controller", "extra"}, 2},
		{[]string{"validate"}, 2},
		{[]string{"-h"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"help"}, 0},
		{[]string{"help", "status"}, 0},
		{[]string{"migrate"}, 2},
		{[]string{"migrate", "-h"}, 0},
		{[]string{"validate", "-h"}, 0},
		{[]string{"status", "--help"}, 0},
		{[]string{"controller", "--log-format=xml"}, 2},
		{[]string{"migrate", "-f", "x.yaml", "--from-cluster"}, 2},
		{[]string{"migrate", "-f", "/nonexistent/metallb.yaml"}, 2},
		{[]string{"status", "-A", "-n", "shop"}, 2},
		// Parsed; fails on the missing cluster, not on the command line.
		{[]string{"status", "default/web", "-o", "json"}, 1},
		{[]string{"drain", "node1", "--undo"}, 1},
	} {
		if got, _, _ := runCLI(c.args...); got != c.want {
			t.Errorf("herald %v: exit %d, want %d", c.args, got, c.want)
		}
	}
}

// Help asked for goes to standard output; a wrong command line to
// standard error, with a message naming the flag or the argument.
func TestMessages(t *testing.T) {
	code, out, errOut := runCLI("status", "-h")
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "Usage: herald status [NAMESPACE/NAME | NAME] [flags]\n") ||
		!strings.Contains(out, "\n  -n, --namespace string\n") || !strings.Contains(out, "\n  -A, --all-namespaces\n") {
		t.Errorf("status -h: exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
	code, out, _ = runCLI("-h")
	for _, name := range order {
		if !strings.Contains(out, "\n  "+name+" ") {
			t.Errorf("herald -h does not list %s:\n%s", name, out)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"controller", "--bogus"}, "herald controller: unknown flag: --bogus\nSee 'herald controller -h' for help.\n"},
		{[]string{"proxy", "--proxy-mode=ipvs"}, `herald proxy: invalid argument "ipvs" for "--proxy-mode" flag`},
		{[]string{"controller", "--workers=0"}, "herald controller: --workers: 0 is out of range"},
		{[]string{"controller", "extra"}, `herald controller: unexpected argument "extra": herald controller takes only flags`},
		{[]string{"nope"}, `herald: unknown command "nope"`},
		{[]string{"status", "-A", "web"}, `herald status: -A lists every Service; it takes no Service name, got "web"`},
		{[]string{"status", "--namespace"}, "herald status: flag needs an argument: --namespace"},
		{[]string{"drain"}, "herald drain: which node?"},
	} {
		code, out, errOut := runCLI(c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("herald %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
	// No command: the help, on standard error.
	if code, out, errOut := runCLI(); code != 2 || out != "" || !strings.HasPrefix(errOut, "Usage: herald COMMAND [flags]") {
		t.Errorf("herald: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestVersion(t *testing.T) {
	want := version.Get().Long()
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		if code, out, _ := runCLI(args...); code != 0 || out != want {
			t.Errorf("herald %v: exit %d, %q; want %q", args, code, out, want)
		}
	}
}

// The flags of `herald status`, before or after the Service, as kubectl
// takes them; -n/--namespace is the Services' namespace, -A every one.
func TestStatusCommandLine(t *testing.T) {
	for _, c := range []struct {
		args    []string
		ns, svc string
		all     bool
		output  string
	}{
		{[]string{"default/web", "-o", "json"}, "default", "web", false, "json"},
		{[]string{"web", "--namespace", "shop", "--output=yaml"}, "shop", "web", false, "yaml"},
		{[]string{"-n", "shop"}, "shop", "", false, "text"},
		{[]string{"-A"}, "", "", true, "text"},
		{[]string{"--all-namespaces", "-oyaml"}, "", "", true, "yaml"},
		{[]string{"-namespace=shop", "web"}, "shop", "web", false, "text"},
	} {
		cmd, _, err := newRoot().Find([]string{"status"})
		if err != nil {
			t.Fatal(err)
		}
		// The command's own flag set, parsed as Main does.
		if err := cmd.ParseFlags(normalizeFor(t, "status", c.args...)); err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		var o status.Options
		o.Output, _ = cmd.Flags().GetString("output")
		o.Namespace, _ = cmd.Flags().GetString("namespace")
		o.AllNamespaces, _ = cmd.Flags().GetBool("all-namespaces")
		if err := o.Complete(cmd.Flags().Args()); err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		if o.Namespace != c.ns || o.Name != c.svc || o.AllNamespaces != c.all || o.Output != c.output {
			t.Errorf("%v: namespace %q name %q -A %v -o %q; want %q %q %v %q", c.args, o.Namespace, o.Name, o.AllNamespaces, o.Output, c.ns, c.svc, c.all, c.output)
		}
	}
}

// Command lines written for Go's flag package, one dash before a long
// name, keep their meaning.
func TestOneDashLongFlags(t *testing.T) {
	// Read as --namespace: the message names it.
	if code, _, errOut := runCLI("controller", "-namespace=Bad_NS"); code != 2 || !strings.Contains(errOut, `--namespace: "Bad_NS" is not a namespace name`) {
		t.Errorf("-namespace=Bad_NS: exit %d, %q", code, errOut)
	}
	// Read as --kubeconfig: the file it names is the one missing.
	if code, _, errOut := runCLI("drain", "node1", "-undo", "-kubeconfig", "/nonexistent/one-dash"); code != 1 || !strings.Contains(errOut, "/nonexistent/one-dash") {
		t.Errorf("-kubeconfig: exit %d, %q", code, errOut)
	}
	o, err := parseDrain(normalizeFor(t, "drain", "-dry-run", "node1"), nil)
	if err != nil || !o.dryRun || o.node != "node1" {
		t.Errorf("-dry-run: %+v, %v", o, err)
	}
	c, err := parseSpeaker(normalizeFor(t, "speaker", "-node-name=n1", "-proxy=false", "-memberlist-port", "7947"), nil)
	if err != nil || c.speaker.NodeName != "n1" || c.speaker.Proxy || c.speaker.Port != 7947 {
		t.Errorf("speaker: %+v, %v", c.speaker, err)
	}
}

// normalizeFor is the command line of `herald name args...` as the
// command's flag set gets it.
func normalizeFor(t *testing.T, name string, args ...string) []string {
	t.Helper()
	out := normalize(newRoot(), append([]string{name}, args...))
	if out[0] != name {
		t.Fatalf("normalize moved the command: %q", out)
	}
	return out[1:]
}

// kube-proxy's own spellings of its flags (it uses pflag too) parse in
// herald proxy and in the speaker that runs the proxy.
func TestKubeProxyFlags(t *testing.T) {
	t.Setenv("NODE_NAME", "n1")
	args := []string{"--v=4", "--bind-address=198.51.100.7", "--detect-local-mode=NodeCIDR", "--proxy-mode=iptables",
		"--iptables-sync-period=45s", "--iptables-min-sync-period", "2s", "--conntrack-max-per-core=0", "--hostname-override=node-a",
		"--kubeconfig=", "--cluster-cidr=198.18.0.0/16", "--healthz-bind-address=0.0.0.0:10256", "--metrics-bind-address=127.0.0.1:10249"}
	for _, name := range []string{"proxy", "speaker"} {
		root := newRoot()
		cmd, _, err := root.Find([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		given := args
		if name == "speaker" {
			// The speaker's node is its own flag; -v is the proxy's.
			given = slices.DeleteFunc(slices.Clone(args), func(a string) bool {
				return strings.HasPrefix(a, "--hostname-override") || strings.HasPrefix(a, "--v=")
			})
		}
		if err := cmd.ParseFlags(normalizeFor(t, name, given...)); err != nil {
			t.Errorf("herald %s %q: %v", name, given, err)
		}
	}
	if code, _, errOut := runCLI("proxy", "-v", "4", "--hostname-override=n1", "--cleanup", "--bogus"); code != 2 || !strings.Contains(errOut, "--bogus") {
		t.Errorf("proxy: exit %d, %q", code, errOut)
	}
}

// Every herald container of the manifests and of the chart's golden
// renderings runs a command line that parses.
func TestManifestArgs(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	paths := []string{filepath.Join(root, "config", "deploy", "herald.yaml"), filepath.Join(root, "config", "proxy-only", "proxy.yaml")}
	golden, err := filepath.Glob(filepath.Join(root, "charts", "testdata", "golden", "*.yaml"))
	if err != nil || len(golden) == 0 {
		t.Fatalf("no golden renderings of the chart: %v", err)
	}
	seen := map[string]bool{}
	for _, path := range append(paths, golden...) {
		objs, err := manifests.DecodeFile(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, o := range objs {
			var spec *corev1.PodSpec
			switch w := o.Obj.(type) {
			case *appsv1.Deployment:
				spec = &w.Spec.Template.Spec
			case *appsv1.DaemonSet:
				spec = &w.Spec.Template.Spec
			case *batchv1.Job:
				spec = &w.Spec.Template.Spec
			default:
				continue
			}
			for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
				if len(c.Args) == 0 || !slices.Contains(order, c.Args[0]) {
					continue
				}
				seen[c.Args[0]] = true
				r := newRoot()
				cmd, _, err := r.Find(c.Args[:1])
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.ParseFlags(normalize(r, c.Args)[1:]); err != nil {
					t.Errorf("%s: %s, container %s: %q: %v", filepath.Base(path), o, c.Name, c.Args, err)
				}
			}
		}
	}
	for _, name := range []string{"controller", "speaker", "proxy", "conntrack", "label-namespace"} {
		if !seen[name] {
			t.Errorf("no manifest runs herald %s: is the test still reading the right files?", name)
		}
	}
}

// TestCommandArgs: a long-running command reads its own part of the
// command line (after its name, normalized) from its context, to read
// its options again when --config changes.
func TestCommandArgs(t *testing.T) {
	var got []string
	root := newRoot()
	for _, c := range root.Commands() {
		if c.Name() == "proxy" {
			c.RunE = func(c *cobra.Command, _ []string) error {
				got = commandArgs(c.Context(), "proxy")
				return nil
			}
		}
	}
	args := normalize(root, []string{"proxy", "-hostname-override=n1", "--config", "/etc/kp/config.conf"})
	root.SetArgs(args)
	if _, err := root.ExecuteContextC(context.WithValue(context.Background(), argsKey{}, args)); err != nil {
		t.Fatal(err)
	}
	want := []string{"--hostname-override=n1", "--config", "/etc/kp/config.conf"}
	if !slices.Equal(got, want) {
		t.Errorf("commandArgs = %q, want %q", got, want)
	}
	if _, err := proxy.ParseFlags(got, io.Discard); err == nil || !strings.Contains(err.Error(), "/etc/kp/config.conf") {
		t.Errorf("reading the options again from them: %v (want the missing file named)", err)
	}
	if commandArgs(context.Background(), "proxy") != nil {
		t.Error("commandArgs without a command line in the context is not nil")
	}
}
