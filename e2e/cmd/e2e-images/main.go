// Command e2e-images makes the images Kubernetes' upstream e2e tests run
// (agnhost, pause, and the others the sig-network tests name) in root's
// podman storage, under the references the pinned framework uses, for
// the lab's image mode (package lab/e2eimages; `make e2e-images`).
//
//	e2e-images [-only agnhost,pause] [-rebuild]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/herald-lb/herald/e2e/lab/e2eimages"
)

func main() {
	only := flag.String("only", "", "comma-separated image names to make (default: all)")
	rebuild := flag.Bool("rebuild", false, "build even the images that are up to date")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := e2eimages.Options{Rebuild: *rebuild, Log: os.Stdout}
	if *only != "" {
		opts.Only = strings.Split(*only, ",")
	}
	res, err := e2eimages.Ensure(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	res.Report(os.Stdout)
}
