// Package pause is the program of the lab's stand-in for the pause image
// (registry.k8s.io/pause), which e2e/cmd/pause wraps: it does nothing
// until SIGINT or SIGTERM, then exits 0. As PID 1 of a container it is
// the parent of every orphan there, so it reaps each child that exits
// (on SIGCHLD), as the real pause does; otherwise zombies would pile up.
package pause

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Version is what -v prints.
const Version = "herald lab pause (stand-in for registry.k8s.io/pause, built from e2e/cmd/pause)"

// Reaper collects exited children without blocking and returns how many
// it collected.
type Reaper func() int

// Main is the program: args are its arguments (without the program's
// name), pid its process ID, sigs the signals it was told of (SIGINT,
// SIGTERM, SIGCHLD). It returns the exit code.
func Main(args []string, pid int, sigs <-chan os.Signal, reap Reaper, stdout, stderr io.Writer) int {
	for _, a := range args {
		// The real pause answers -v and ignores any other argument.
		if strings.EqualFold(a, "-v") {
			fmt.Fprintln(stdout, Version)
			return 0
		}
	}
	if pid != 1 {
		fmt.Fprintln(stderr, "Warning: pause should be the first process")
	}
	for sig := range sigs {
		switch sig {
		case syscall.SIGINT, syscall.SIGTERM:
			fmt.Fprintf(stderr, "Shutting down, got signal: %s\n", sig)
			return 0
		case syscall.SIGCHLD:
			reap()
		}
	}
	fmt.Fprintln(stderr, "Error: the signal channel closed")
	return 42
}

// ReapChildren waits for every child that has exited, without blocking.
func ReapChildren() int {
	n := 0
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return n
		}
		n++
	}
}
