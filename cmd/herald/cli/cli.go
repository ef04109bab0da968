// Package cli is the herald command line: the controller, the speaker,
// the proxy and the user's tools as subcommands of one binary, on cobra
// and pflag as kubectl's: GNU-style flags (--namespace, -n), flags
// before or after the arguments, -h and --help on every command.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/herald-lb/herald/cmd/herald/cli/status"
	"github.com/herald-lb/herald/config/validate"
	"github.com/herald-lb/herald/controller"
	"github.com/herald-lb/herald/internal/flagusage"
	"github.com/herald-lb/herald/internal/logging"
	"github.com/herald-lb/herald/internal/version"
	"github.com/herald-lb/herald/proxy"
	"github.com/herald-lb/herald/proxy/conntrack"
)

// order is the order `herald -h` lists the commands in.
var order = []string{"controller", "speaker", "proxy", "status", "drain", "validate", "migrate", "label-namespace", "conntrack", "version"}

// Main runs the command line args (the program's name left out) and
// returns the exit code: 0, 2 for a wrong command line (its message
// names the flag or the argument), else the command's own.
func Main(args []string) int { return run(args, os.Stdout, os.Stderr) }

func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetOut(stdout)
	root.SetErr(stderr)
	args = normalize(root, args)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(context.WithValue(context.Background(), argsKey{}, args))
	var code exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	}
	name := cmd.CommandPath()
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	fmt.Fprintf(stderr, "See '%s -h' for help.\n", name)
	return 2
}

// normalize rewrites the one-dash long flags of the command args name
// (see flagusage.Normalize). It never makes a nil slice, which cobra
// would take for "no arguments given: read os.Args".
func normalize(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil {
		return append([]string{}, args...)
	}
	cmd.InitDefaultHelpFlag()
	fs := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	fs.AddFlagSet(cmd.Flags())
	fs.AddFlagSet(cmd.InheritedFlags())
	return append([]string{}, flagusage.Normalize(fs, args)...)
}

// argsKey carries the command line, normalized, in the commands'
// context: the long-running ones read their options again from it
// (commandArgs).
type argsKey struct{}

// commandArgs is what followed the command's name on the command line.
func commandArgs(ctx context.Context, name string) []string {
	args, _ := ctx.Value(argsKey{}).([]string)
	for i, a := range args {
		if a == name {
			return args[i+1:]
		}
	}
	return nil
}

// exitCode ends a command that has said why (or needs not) with this
// status.
type exitCode int

func (e exitCode) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// newRoot builds the command tree: `herald`, with --version, and one
// subcommand per entry of order.
func newRoot() *cobra.Command {
	var showVersion bool
	root := &cobra.Command{
		Use:  "herald",
		Long: "herald gives bare-metal Kubernetes clusters LoadBalancer Services, and can replace kube-proxy.",
		Annotations: map[string]string{
			synopsis: "herald COMMAND [flags]\nherald --version",
			epilogue: "`herald COMMAND -h` describes a command and its flags.",
		},
		// A word that is no command: an error, not a positional argument.
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q", args[0])
			}
			return nil
		},
		RunE: func(c *cobra.Command, _ []string) error {
			if showVersion {
				fmt.Fprint(c.OutOrStdout(), version.Get().Long())
				return nil
			}
			writeHelp(c.ErrOrStderr(), c)
			return exitCode(2)
		},
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.Flags().BoolVar(&showVersion, "version", false, "print the version, git revision and Go version (as herald version)")
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetHelpFunc(func(c *cobra.Command, _ []string) { writeHelp(c.OutOrStdout(), c) })
	// cobra's own calls for the usage (`herald help nope`) get the same text.
	root.SetUsageFunc(func(c *cobra.Command) error { writeHelp(c.OutOrStderr(), c); return nil })
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	root.AddCommand(controllerCommand(), speakerCommand(), proxyCommand(), statusCommand(), drainCommand(),
		validateCommand(), migrateCommand(), labelNamespaceCommand(), conntrackCommand(), versionCommand())
	return root
}

// Annotations of a command that its help prints.
const (
	synopsis = "synopsis" // the usage lines, one per form
	epilogue = "epilogue" // a line after the flags
)

// command is a subcommand of herald: use is its synopsis after "herald
// " (one line per form; its first word is its name), short its line in
// `herald -h`, long what its help says.
func command(use, short, long string, args cobra.PositionalArgs) *cobra.Command {
	lines := strings.Split(use, "\n")
	for i, l := range lines {
		lines[i] = "herald " + l
	}
	return &cobra.Command{
		Use: strings.Fields(use)[0], Short: short, Long: long, Args: args,
		Annotations: map[string]string{synopsis: strings.Join(lines, "\n")},
	}
}

// onlyFlags refuses positional arguments.
func onlyFlags(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q: %s takes only flags", args[0], c.CommandPath())
	}
	return nil
}

// writeHelp writes c's help: its synopsis, what it does, its
// subcommands and its flags.
func writeHelp(w io.Writer, c *cobra.Command) {
	c.InitDefaultHelpFlag()
	use := c.Annotations[synopsis]
	if use == "" {
		use = c.CommandPath()
	}
	fmt.Fprintf(w, "Usage: %s\n", strings.ReplaceAll(use, "\n", "\n       "))
	if c.Long != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.Long))
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintln(w, "\nCommands:")
		width := 0
		for _, name := range order {
			width = max(width, len(name))
		}
		for _, name := range order {
			if sub, _, err := c.Find([]string{name}); err == nil && sub != c {
				fmt.Fprintf(w, "  %-*s  %s\n", width, name, sub.Short)
			}
		}
	}
	fmt.Fprintln(w, "\nFlags:")
	flagusage.Write(w, c.Flags())
	if e := c.Annotations[epilogue]; e != "" {
		fmt.Fprintf(w, "\n%s\n", e)
	}
}

func versionCommand() *cobra.Command {
	c := command("version", "print the version, git revision and Go version", "Prints herald's version, the git revision it was built from and the Go version (as herald --version).", onlyFlags)
	c.RunE = func(c *cobra.Command, _ []string) error {
		fmt.Fprint(c.OutOrStdout(), version.Get().Long())
		return nil
	}
	return c
}

func controllerCommand() *cobra.Command {
	c := command("controller [flags]", "assign LoadBalancer IPs to Services from IPAddressPools",
		"Assigns external IPs from IPAddressPools to LoadBalancer Services.", onlyFlags)
	o := controller.DefaultOptions()
	finish := controller.Flags(c.Flags(), &o)
	return longRunning(c, finish, func(w io.Writer) *slog.Logger { return logging.New(w, o.LogFormat, slog.LevelInfo) },
		func(ctx context.Context, log *slog.Logger) error { return controller.Run(ctx, o, log) })
}

func proxyCommand() *cobra.Command {
	c := command("proxy [flags]", "service proxy replacing kube-proxy (iptables or nftables)",
		"Programs this node's iptables (or nftables, --proxy-mode=nftables) for ClusterIP, NodePort, LoadBalancer\n"+
			"and external IPs, like kube-proxy's iptables and nftables modes. Its flags are kube-proxy's where\n"+
			"kube-proxy has them, written as kube-proxy's are (--v=4, -v 4).", onlyFlags)
	o := proxy.DefaultOptions()
	finish := proxy.Flags(c.Flags(), &o)
	return longRunning(c, finish, func(w io.Writer) *slog.Logger { return logging.New(w, o.LogFormat, o.LogLevel()) },
		func(ctx context.Context, log *slog.Logger) error {
			// --config's file is read again when it changes, with the
			// same command line.
			reread := func() (proxy.Options, error) { return proxy.ParseFlags(commandArgs(ctx, "proxy"), io.Discard) }
			return runProxy(ctx, o, reread, log)
		})
}

func speakerCommand() *cobra.Command {
	c := command("speaker [flags]", "announce LoadBalancer IPs over layer 2 and BGP, and run the proxy",
		"Answers ARP and NDP for the LoadBalancer IPs this node wins, advertises them over\n"+
			"BGP to the BGPPeers selecting it, and runs the service\n"+
			"proxy (the proxy's flags are accepted too; see herald proxy -h).", onlyFlags)
	sc := newSpeakerCmd()
	finish := sc.flags(c.Flags())
	return longRunning(c, finish, func(w io.Writer) *slog.Logger { return logging.New(w, sc.speaker.LogFormat, sc.speaker.LogLevel) },
		func(ctx context.Context, log *slog.Logger) error {
			reread := func() (proxy.Options, error) {
				c, err := parseSpeaker(commandArgs(ctx, "speaker"), io.Discard)
				return c.proxy, err
			}
			return runSpeaker(ctx, *sc, reread, log)
		})
}

// longRunning makes c a long-running component: finish checks its flags once
// they are parsed (exit 2), then run runs it, logging through the logger
// made for standard error, until SIGINT or SIGTERM (exit 1 when it stops
// with an error).
func longRunning(c *cobra.Command, finish func() error, logger func(io.Writer) *slog.Logger, run func(context.Context, *slog.Logger) error) *cobra.Command {
	c.RunE = func(c *cobra.Command, _ []string) error {
		if err := finish(); err != nil {
			return err
		}
		log := logger(c.ErrOrStderr())
		ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := run(ctx, log); err != nil {
			log.Error(c.CommandPath()+" stopped", "err", err)
			return exitCode(1)
		}
		return nil
	}
	return c
}

// conntrackCommand writes the settings; exit 0 also when some could not
// be written (they are logged): the proxy works with the kernel's values.
func conntrackCommand() *cobra.Command {
	c := command("conntrack [flags]", "write kube-proxy's conntrack settings and exit (the Helm chart's init container runs it)",
		"Writes the kernel's conntrack settings as kube-proxy does at start (the table's size and the\n"+
			"timeouts, kube-proxy's defaults), logs each change and exits. The proxy writes them itself too,\n"+
			"but runs with /proc/sys read-only in its container: the Helm chart runs this in a privileged\n"+
			"init container first. A setting that cannot be written is a warning, not a failure.", onlyFlags)
	t, format := conntrack.DefaultTuning(), logging.Text
	finish := proxy.ConntrackFlags(c.Flags(), &t, &format)
	c.RunE = func(c *cobra.Command, _ []string) error {
		if err := finish(); err != nil {
			return err
		}
		log := logging.New(c.ErrOrStderr(), format, slog.LevelInfo)
		written, failed := proxy.TuneConntrack(t, log)
		log.Info("conntrack settings done", "written", written, "leftAsTheyAre", failed)
		return nil
	}
	return c
}

// files collects repeated -f flags.
type files []string

// validateOptions are `herald validate`'s flags.
type validateOptions struct {
	files     []string
	namespace string
}

func validateFlags(fs *pflag.FlagSet, o *validateOptions) {
	fs.StringArrayVarP(&o.files, "filename", "f", nil, "YAML `file` to check (repeatable; - for stdin)")
	fs.StringVarP(&o.namespace, "namespace", "n", "herald-system", "the configuration's namespace, the one herald reads it from: objects of another namespace are reported")
}

func validateCommand() *cobra.Command {
	c := command("validate -f FILE [-f FILE...] [flags]\nvalidate FILE... [flags]", "check herald YAML offline before kubectl apply",
		"Runs herald's configuration parser over the files and prints every problem; exits 1 if there is any.", cobra.ArbitraryArgs)
	var o validateOptions
	validateFlags(c.Flags(), &o)
	c.RunE = func(c *cobra.Command, args []string) error {
		paths := append(o.files, args...)
		if len(paths) == 0 {
			return errors.New("give -f FILE (or the files as arguments)")
		}
		n, err := validate.Files(c.OutOrStdout(), o.namespace, paths)
		if err != nil {
			fmt.Fprintf(c.ErrOrStderr(), "herald validate: %v\n", err)
			return exitCode(2)
		}
		if n > 0 {
			return exitCode(1)
		}
		return nil
	}
	return c
}

func statusCommand() *cobra.Command {
	c := command(status.Usage, "show each LoadBalancer Service's IPs, pool and announcing node", status.Description, cobra.ArbitraryArgs)
	var o status.Options
	status.Flags(c.Flags(), &o)
	c.RunE = func(c *cobra.Command, args []string) error {
		if err := o.Complete(args); err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := status.Run(ctx, o, c.OutOrStdout()); err != nil {
			fmt.Fprintf(c.ErrOrStderr(), "herald status: %v\n", err)
			return exitCode(1)
		}
		return nil
	}
	return c
}
