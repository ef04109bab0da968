// Command lab-runc is the runc real lab nodes' containerd runs: it raises
// a negative OOM score in the container's spec to 0 (realnode.ClampOOMScore
// says why), then executes the machine's runc with the same arguments.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/herald-lb/herald/e2e/lab/realnode"
)

func main() {
	args := os.Args[1:]
	if bundle := realnode.BundleToClamp(args); bundle != "" {
		if was, err := realnode.ClampBundle(bundle); err != nil {
			fmt.Fprintf(os.Stderr, "lab-runc: %v\n", err)
			os.Exit(1)
		} else if was < 0 {
			fmt.Fprintf(os.Stderr, "lab-runc: oomScoreAdj %d raised to 0 (no CAP_SYS_RESOURCE here)\n", was)
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		fmt.Fprintf(os.Stderr, "lab-runc: %v\n", err)
		os.Exit(1)
	}
	if err := syscall.Exec(runc, append([]string{"runc"}, args...), os.Environ()); err != nil {
		fmt.Fprintf(os.Stderr, "lab-runc: exec %s: %v\n", runc, err)
		os.Exit(1)
	}
}
