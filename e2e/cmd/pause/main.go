// Command pause is the program of the lab's pause image (the stand-in for
// registry.k8s.io/pause that e2e/lab/e2eimages builds FROM scratch): it
// waits for SIGINT or SIGTERM and exits 0, reaping the children it
// inherits as PID 1 (package lab/pause). Built statically
// (CGO_ENABLED=0), it needs nothing else in the image.
package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/herald-lb/herald/e2e/lab/pause"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	os.Exit(pause.Main(os.Args[1:], os.Getpid(), sigs, pause.ReapChildren, os.Stdout, os.Stderr))
}
