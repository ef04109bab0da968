// Package cli is the herald command line: the controller, the speaker,
// the proxy and the user's tools as subcommands of one binary.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/herald-lb/herald/cmd/herald/cli/status"
	"github.com/herald-lb/herald/config/validate"
	"github.com/herald-lb/herald/controller"
	"github.com/herald-lb/herald/internal/flagusage"
	"github.com/herald-lb/herald/internal/logging"
	"github.com/herald-lb/herald/internal/version"
	"github.com/herald-lb/herald/proxy"
)

type command struct {
	summary string
	run     func(args []string) int
}

var commands = map[string]command{
	"validate": {"check herald YAML offline before kubectl apply", runValidate},
	"version":  {"print the version, git revision and Go version", func([]string) int { fmt.Print(version.Get().Long()); return 0 }},
	"controller": {"assign LoadBalancer IPs to Services from IPAddressPools",
		longRunning("controller", controller.ParseFlags, func(o controller.Options) (logging.Format, slog.Level) { return o.LogFormat, slog.LevelInfo }, controller.Run)},
	"proxy": {"service proxy replacing kube-proxy (iptables or nftables)",
		longRunning("proxy", proxy.ParseFlags, func(o proxy.Options) (logging.Format, slog.Level) { return o.LogFormat, o.LogLevel() }, runProxy)},
	"speaker": {"announce LoadBalancer IPs over layer 2 and BGP, and run the proxy",
		longRunning("speaker", parseSpeaker, func(c speakerCmd) (logging.Format, slog.Level) { return c.speaker.LogFormat, c.speaker.LogLevel }, runSpeaker)},
	"status":          {"show each LoadBalancer Service's IPs, pool and announcing node", runStatus},
	"migrate":         {"translate MetalLB's configuration into herald's", runMigrate},
	"drain":           {"hand a node's addresses and routes over before maintenance (--undo: take part again)", runDrain},
	"label-namespace": {"set a namespace's Pod Security labels (the Helm chart's install hook runs it)", runLabelNamespace},
	"conntrack":       {"write kube-proxy's conntrack settings and exit (the Helm chart's init container runs it)", runConntrack},
}

var order = []string{"controller", "speaker", "proxy", "status", "drain", "validate", "migrate", "label-namespace", "conntrack", "version"}

// runConntrack writes the settings; exit 0 also when some could not be
// written (they are logged): the proxy works with the kernel's values.
func runConntrack(args []string) int {
	t, format, err := proxy.ParseConntrackFlags(args, flagusage.Output(args))
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "herald conntrack: %v\n", err)
		return 2
	}
	log := logging.New(os.Stderr, format, slog.LevelInfo)
	written, failed := proxy.TuneConntrack(t, log)
	log.Info("conntrack settings done", "written", written, "leftAsTheyAre", failed)
	return 0
}

// Main runs the subcommand named by args[0] and returns the exit code.
func Main(args []string) int {
	if len(args) < 1 {
		usage(os.Stderr)
		return 2
	}
	cmd, ok := commands[args[0]]
	if !ok {
		// Asked for, help is the output: stdout and success.
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			usage(os.Stdout)
			return 0
		}
		fmt.Fprintf(os.Stderr, "herald: unknown command %q\n", args[0])
		usage(os.Stderr)
		return 2
	}
	return cmd.run(args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: herald COMMAND [flags]\n\ncommands:")
	width := 0
	for _, name := range order {
		width = max(width, len(name))
	}
	for _, name := range order {
		fmt.Fprintf(w, "  %-*s  %s\n", width, name, commands[name].summary)
	}
	fmt.Fprintln(w, "\n`herald COMMAND -h` describes a command and its flags.")
}

// files collects repeated -f flags.
type files []string

func (f *files) String() string     { return fmt.Sprint(*f) }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

func runValidate(args []string) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(flagusage.Output(args))
	var paths files
	fs.Var(&paths, "f", "YAML file to check (repeatable; - for stdin)")
	ns := fs.String("namespace", "herald-system", "namespace herald reads its configuration from")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: herald validate -f FILE [-f FILE...] [--namespace NS]\n\nRuns herald's configuration parser over the files and prints every problem; exits 1 if there is any.")
		flagusage.PrintDefaults(fs.Output(), fs)
	}
	pos, err := flagusage.Parse(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	paths = append(paths, pos...)
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

// longRunning parses a component's flags and runs it until SIGINT or SIGTERM:
// exit 0 on -h, 2 on bad flags, 1 when it stops with an error.
func longRunning[O any](name string, parse func([]string, io.Writer) (O, error), logOpts func(O) (logging.Format, slog.Level),
	run func(context.Context, O, *slog.Logger) error) func([]string) int {
	return func(args []string) int {
		opts, err := parse(args, flagusage.Output(args))
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "herald %s: %v\n", name, err)
			return 2
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		format, level := logOpts(opts)
		log := logging.New(os.Stderr, format, level)
		if err := run(ctx, opts, log); err != nil {
			log.Error("herald "+name+" stopped", "err", err)
			return 1
		}
		return 0
	}
}

func runStatus(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return status.Main(ctx, args)
}
