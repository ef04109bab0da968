package flagusage

import (
	"flag"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func TestDefaultsOnce(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("namespace", "herald-system", "namespace (default: $POD_NAMESPACE or herald-system)")
	fs.String("lb-class", "", "class to handle")
	fs.String("mode", "iptables", "proxy mode")
	fs.Duration("sync-period", 30*time.Second, "most time between two syncs")
	fs.Bool("v", false, "verbose")
	var b strings.Builder
	PrintDefaults(&b, fs)
	out := b.String()
	for _, want := range []string{
		"  -namespace string\n    \tnamespace (default: $POD_NAMESPACE or herald-system)\n",
		"  -lb-class string\n    \tclass to handle\n",
		"  -mode string\n    \tproxy mode (default \"iptables\")\n",
		"  -sync-period duration\n    \tmost time between two syncs (default 30s)\n",
		"  -v\tverbose\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, `(default "herald-system")`) {
		t.Errorf("default said twice:\n%s", out)
	}
}

func TestOutput(t *testing.T) {
	if Output([]string{"--namespace", "x", "-h"}) != os.Stdout || Output([]string{"--help"}) != os.Stdout {
		t.Error("help asked for: want stdout")
	}
	if Output([]string{"--bogus"}) != os.Stderr || Output([]string{"--", "-h"}) != os.Stderr {
		t.Error("no help asked for: want stderr")
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		args     []string
		o        string
		n        bool
		pos      []string
		wantFail bool
	}{
		{[]string{"default/web", "-o", "json"}, "json", false, []string{"default/web"}, false},
		{[]string{"-o", "yaml", "web", "-n"}, "yaml", true, []string{"web"}, false},
		{[]string{"a", "b", "-n", "c"}, "", true, []string{"a", "b", "c"}, false},
		{[]string{"-n", "--", "-o", "x"}, "", true, []string{"-o", "x"}, false},
		{[]string{"web", "-bogus"}, "", false, nil, true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o := fs.String("o", "", "")
		n := fs.Bool("n", false, "")
		pos, err := Parse(fs, c.args)
		if (err != nil) != c.wantFail {
			t.Errorf("%q: error %v", c.args, err)
			continue
		}
		if c.wantFail {
			continue
		}
		if *o != c.o || *n != c.n || strings.Join(pos, " ") != strings.Join(c.pos, " ") {
			t.Errorf("%q: -o %q -n %v positional %q; want %q %v %q", c.args, *o, *n, pos, c.o, c.n, c.pos)
		}
	}
}
