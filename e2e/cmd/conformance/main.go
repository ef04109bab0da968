// Command conformance runs Kubernetes' upstream sig-network e2e tests
// against the lab with kube-proxy and with herald and prints the table
// (package conformance; `make conformance`, root).
//
//	conformance [-proxies kube-proxy,herald] [-nodes 3] [-procs 3] [-focus RE] [-skip RE] [-out DIR]
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/herald-lb/herald/e2e/conformance"
	"github.com/herald-lb/herald/e2e/lab/e2eimages"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ensure := func(ctx context.Context) error {
		res, err := e2eimages.Ensure(ctx, e2eimages.Options{Log: os.Stdout})
		if err == nil {
			res.Report(os.Stdout)
		}
		return err
	}
	os.Exit(conformance.Main(ctx, os.Args[1:], ensure))
}
