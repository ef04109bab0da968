// Command lab-prober sends GET / to each address given, on a new
// connection (or with -persistent over one kept connection) every -every, and writes one line per request on stdout
// (package lab/prober), until SIGTERM or until its standard input ends.
// The e2e harness starts it inside a lab namespace (ip netns exec) so
// that its probes do not share the test process's stalls.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/herald-lb/herald/e2e/lab/prober"
)

func main() {
	var cfg prober.Config
	flag.IntVar(&cfg.Port, "port", 80, "the port of every target")
	flag.DurationVar(&cfg.Every, "every", 100*time.Millisecond, "time between two requests to one target")
	flag.DurationVar(&cfg.Timeout, "timeout", time.Second, "bound of one request, connecting included")
	flag.DurationVar(&cfg.LateAfter, "late-after", 0, "report a request sent this much later than its turn (default -every)")
	flag.BoolVar(&cfg.Persistent, "persistent", false, "send each target's requests over one kept connection, connecting anew only after a failure")
	stdin := flag.Bool("stdin", true, "stop when standard input ends (the parent went away)")
	flag.Parse()
	cfg.Targets = flag.Args()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if *stdin {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop()
		}()
	}
	if err := prober.Run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "lab-prober:", err)
		os.Exit(1)
	}
}
