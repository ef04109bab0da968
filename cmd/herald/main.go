// Command herald is the single binary of herald: the controller, the
// speaker, the proxy and the user's tools are its subcommands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/herald-lb/herald/config/validate"
	"github.com/herald-lb/herald/controller"
	"github.com/herald-lb/herald/internal/version"
	"github.com/herald-lb/herald/proxy"
	"github.com/herald-lb/herald/speaker"
	"github.com/herald-lb/herald/speaker/status"
)

type command struct {
	summary string
	run     func(args []string) int
}

var commands = map[string]command{
	"validate":   {"check herald YAML offline before kubectl apply", runValidate},
	"version":    {"print the version", func([]string) int { fmt.Println(version.String()); return 0 }},
	"controller": {"assign LoadBalancer IPs to Services from IPAddressPools", runController},
	"proxy":      {"iptables service proxy replacing kube-proxy", runProxy},
	"speaker":    {"announce LoadBalancer IPs on the LAN (layer 2) and run the proxy", runSpeaker},
	"status":     {"show each LoadBalancer Service's IPs, pool and announcing node", runStatus},
}

var order = []string{"controller", "speaker", "proxy", "status", "validate", "version"}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		if os.Args[1] != "-h" && os.Args[1] != "--help" && os.Args[1] != "help" {
			fmt.Fprintf(os.Stderr, "herald: unknown command %q\n", os.Args[1])
		}
		usage()
		os.Exit(2)
	}
	os.Exit(cmd.run(os.Args[2:]))
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: herald COMMAND [flags]\n\ncommands:")
	for _, name := range order {
		fmt.Fprintf(os.Stderr, "  %-11s %s\n", name, commands[name].summary)
	}
}

// files collects repeated -f flags.
type files []string

func (f *files) String() string     { return fmt.Sprint(*f) }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

func runValidate(args []string) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	var paths files
	fs.Var(&paths, "f", "YAML file to check (repeatable; - for stdin)")
	ns := fs.String("namespace", "herald-system", "namespace herald reads its configuration from")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: herald validate -f FILE [-f FILE...] [--namespace NS]\n\nRuns herald's configuration parser over the files and prints every problem; exits 1 if there is any.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	paths = append(paths, fs.Args()...)
	if len(paths) == 0 {
		fs.Usage()
		return 2
	}
	n, err := validate.Files(os.Stdout, *ns, paths)
	if err != nil {
		fmt.Fprintf(os.Stderr, "herald validate: %v\n", err)
		return 2
	}
	if n > 0 {
		return 1
	}
	return 0
}

func runController(args []string) int {
	opts, err := controller.ParseFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "herald controller: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := controller.Run(ctx, opts, log); err != nil {
		log.Error("herald controller stopped", "err", err)
		return 1
	}
	return 0
}

func runProxy(args []string) int {
	opts, err := proxy.ParseFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "herald proxy: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := proxy.Run(ctx, opts, log); err != nil {
		log.Error("herald proxy stopped", "err", err)
		return 1
	}
	return 0
}

func runSpeaker(args []string) int {
	opts, err := speaker.ParseFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "herald speaker: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: opts.LogLevel}))
	if err := speaker.Run(ctx, opts, log); err != nil {
		log.Error("herald speaker stopped", "err", err)
		return 1
	}
	return 0
}

func runStatus(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return status.Main(ctx, args)
}
