package flagusage

import (
	"flag"
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
