package cli

import "testing"

func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, 2},
		{[]string{"nope"}, 2},
		{[]string{"version"}, 0},
		{[]string{"proxy", "--bogus"}, 2},
		{[]string{"speaker", "-h"}, 0},
		{[]string{"controller", "--bogus"}, 2},
		{[]string{"validate"}, 2},
		{[]string{"-h"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"help"}, 0},
		{[]string{"migrate"}, 2},
		{[]string{"migrate", "-h"}, 0},
		{[]string{"validate", "-h"}, 0},
		{[]string{"status", "--help"}, 0},
		{[]string{"controller", "--log-format=xml"}, 2},
		{[]string{"migrate", "-f", "x.yaml", "--from-cluster"}, 2},
		{[]string{"migrate", "-f", "/nonexistent/metallb.yaml"}, 2},
	} {
		if got := Main(c.args); got != c.want {
			t.Errorf("herald %v: exit %d, want %d", c.args, got, c.want)
		}
	}
}
