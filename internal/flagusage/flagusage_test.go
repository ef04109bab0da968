package flagusage

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestWrite(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.StringP("namespace", "n", "herald-system", "namespace (default: $POD_NAMESPACE or herald-system)")
	fs.String("lb-class", "", "class to handle")
	fs.String("mode", "iptables", "proxy mode")
	fs.Duration("sync-period", 30*time.Second, "most time between two syncs")
	fs.BoolP("all", "A", false, "every namespace")
	fs.Bool("bgp", true, "peer with routers")
	fs.String("long", "", strings.Repeat("word ", 30)+"end")
	var b strings.Builder
	Write(&b, fs)
	out := b.String()
	for _, want := range []string{
		"  -n, --namespace string\n        namespace (default: $POD_NAMESPACE or herald-system)\n",
		"      --lb-class string\n        class to handle\n",
		"      --mode string\n        proxy mode (default \"iptables\")\n",
		"      --sync-period duration\n        most time between two syncs (default 30s)\n",
		"  -A, --all\n        every namespace\n",
		"      --bgp\n        peer with routers (default true)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, `(default "herald-system")`) {
		t.Errorf("default said twice:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if len(line) > Width {
			t.Errorf("line longer than %d: %q", Width, line)
		}
	}
	if !strings.Contains(out, "word\n        word") || !strings.Contains(out, "word end\n") {
		t.Errorf("long usage not wrapped:\n%s", out)
	}
}

func TestNormalize(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		// Go's flag package's one dash, for long names.
		{"-namespace=lb -kubeconfig k web", "--namespace=lb --kubeconfig k web"},
		{"-undo -dry-run node1", "--undo --dry-run node1"},
		{"-help", "--help"},
		// Shorthands stay shorthands, with their values.
		{"-n lb -o json -A -v=4 -v 2", "-n lb -o json -A -v=4 -v 2"},
		{"-ojson -An lb", "-ojson -An lb"},
		// A value is never rewritten, nor what follows "--".
		{"--kubeconfig -undo -f -namespace", "--kubeconfig -undo -f -namespace"},
		{"-- -namespace", "-- -namespace"},
		// Unknown: left for the parser to refuse.
		{"-bogus=1 --bogus -x", "-bogus=1 --bogus -x"},
		{"- web", "- web"},
	} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.StringP("namespace", "n", "", "")
		fs.StringP("output", "o", "", "")
		fs.StringP("filename", "f", "", "")
		fs.BoolP("all-namespaces", "A", false, "")
		fs.IntP("v", "v", 0, "")
		fs.String("kubeconfig", "", "")
		fs.Bool("undo", false, "")
		fs.Bool("dry-run", false, "")
		fs.BoolP("help", "h", false, "")
		if got := strings.Join(Normalize(fs, strings.Fields(c.in)), " "); got != c.want {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
}

// What Normalize writes, pflag reads as Go's flag package read the
// original.
func TestNormalizeThenParse(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ns := fs.StringP("namespace", "n", "", "")
	undo := fs.Bool("undo", false, "")
	v := fs.IntP("v", "v", 0, "")
	args := []string{"node1", "-namespace=lb", "-undo", "-v=4"}
	if err := fs.Parse(Normalize(fs, args)); err != nil {
		t.Fatal(err)
	}
	if *ns != "lb" || !*undo || *v != 4 || strings.Join(fs.Args(), " ") != "node1" {
		t.Errorf("namespace %q undo %v v %d args %q", *ns, *undo, *v, fs.Args())
	}
	// Without the rewrite pflag reads -namespace=lb as -n amespace=lb.
	raw := pflag.NewFlagSet("t", pflag.ContinueOnError)
	raw.SetOutput(io.Discard)
	rawNS := raw.StringP("namespace", "n", "", "")
	if err := raw.Parse([]string{"-namespace=lb"}); err != nil || *rawNS != "amespace=lb" {
		t.Errorf("pflag's own reading changed: %q, %v (the rewrite may no longer be needed)", *rawNS, err)
	}
}
