package realnode

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestNodeCommandHostName runs the part of a node's command line after the
// network namespace (which needs the lab) around /bin/hostname: the
// process sees the node's name, and the machine keeps its own.
func TestNodeCommandHostName(t *testing.T) {
	c := testConfig()
	cmd, args := NodeCommand(c, "hostname", nil)
	if cmd != "nsenter" || len(args) < 2 || args[0] != "--net=/var/run/netns/hlab-node1" || args[1] != "--" {
		t.Fatalf("NodeCommand = %s %q: want nsenter into the node's network namespace first", cmd, args)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: unshare --uts")
	}
	before, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	tail := args[2:]
	out, err := exec.Command(tail[0], tail[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%q: %v\n%s", tail, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != c.Name {
		t.Errorf("the node's process sees host name %q, want the node's name %q", got, c.Name)
	}
	if after, _ := os.Hostname(); after != before {
		t.Errorf("the machine's host name changed from %q to %q", before, after)
	}
	// The arguments reach the program unchanged, spaces and all.
	_, args = NodeCommand(c, "echo", []string{"a b", "--flag=$HOME"})
	out, err = exec.Command(args[2], args[3:]...).Output()
	if err != nil || strings.TrimSpace(string(out)) != "a b --flag=$HOME" {
		t.Errorf("arguments through the wrapper: %q, %v", out, err)
	}
	if !slices.Contains(args, c.Name) {
		t.Errorf("the node's name is not on the command line: %q", args)
	}
}
