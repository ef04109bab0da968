// Command herald-lab drives the lab: a Kubernetes cluster on one machine,
// nodes and pods as network namespaces (package lab/cluster).
//
//	herald-lab up [--nodes N] [--bare] [--image-mode] [--real-nodes] [--proxy herald|kube-proxy] [--k8s-version V]
//	                                       build what is missing, bring a lab up, return
//	herald-lab status                       what runs, what is missing
//	herald-lab exec TARGET -- CMD [ARG...]  run CMD in node1.., client, router, remote, pod/[NS/]NAME
//	herald-lab kubeconfig                   print the admin kubeconfig's path
//	herald-lab walkthrough                  the "Using Source IP" tutorial, step by step, judged
//	herald-lab vtysh [-- ARGS]              FRR's shell on the lab router
//	herald-lab down                         remove everything the lab made (also after a crash)
//	herald-lab build [--k8s-version V]      build or reuse the multi-call Kubernetes binary
//	herald-lab controlplane up|down|status  the control plane alone
//
// The lab's processes outlive `up`; `down` stops them by the PIDs in the
// state file (default /tmp/herald-lab/hlab/lab.json).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/controlplane"
	"github.com/herald-lb/herald/e2e/lab/k8sbin"
	"github.com/herald-lb/herald/e2e/lab/topology"
	"github.com/herald-lb/herald/e2e/lab/walkthrough"
)

const defaultState = "/tmp/herald-lab/controlplane"

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  herald-lab up [--nodes N] [--bare] [--image-mode] [--real-nodes] [--proxy herald|kube-proxy]
                [--k8s-version V] [--prefix P] [--state DIR] [--e2e DIR] [--wait] [--reuse]
  herald-lab status [--state DIR]
  herald-lab exec [--state DIR] TARGET -- CMD [ARG...]
      TARGET: node1..nodeN, client, router, remote, pod/NAME, pod/NAMESPACE/NAME
  herald-lab kubeconfig [--state DIR]
  herald-lab walkthrough [--state DIR]
  herald-lab vtysh [--state DIR] [-- VTYSH-ARGS]   e.g. -- -c 'show bgp summary'
  herald-lab down [--state DIR] [--keep-logs]
  herald-lab build [--e2e DIR] [--k8s-version V]
  herald-lab controlplane up     [--state DIR] [--address IP] [--port N] [--e2e DIR] [--k8s-version V]
  herald-lab controlplane down   [--state DIR] [--keep-logs]
  herald-lab controlplane status [--state DIR]
`)
	os.Exit(2)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(ctx, os.Args[2:])
	case "down":
		err = down(ctx, os.Args[2:])
	case "status":
		err = status(ctx, os.Args[2:])
	case "exec":
		var code int
		code, err = execIn(ctx, os.Args[2:])
		if err == nil {
			os.Exit(code)
		}
	case "kubeconfig":
		err = printKubeconfig(os.Args[2:])
	case "vtysh":
		var code int
		code, err = vtysh(ctx, os.Args[2:])
		if err == nil {
			os.Exit(code)
		}
	case "walkthrough":
		err = walk(ctx, os.Args[2:])
	case "build":
		err = build(ctx, os.Args[2:])
	case "controlplane":
		if len(os.Args) < 3 {
			usage()
		}
		switch os.Args[2] {
		case "up":
			err = cpUp(ctx, os.Args[3:])
		case "down":
			err = cpDown(os.Args[3:])
		case "status":
			err = cpStatus(os.Args[3:])
		default:
			usage()
		}
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "herald-lab:", err)
		os.Exit(1)
	}
}

func build(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	e2e := fs.String("e2e", "", "the e2e module directory (default: found from the current directory)")
	version := fs.String("k8s-version", os.Getenv(k8sbin.VersionEnv), "the k8s.io/kubernetes release to build, e.g. v1.31.14 (default $"+k8sbin.VersionEnv+", else the one e2e/go.mod pins)")
	_ = fs.Parse(args)
	b, err := k8sbin.Ensure(ctx, k8sbin.Options{ModuleDir: *e2e, Version: *version})
	if err != nil {
		return err
	}
	fmt.Println(b.Dir)
	return nil
}

func cpUp(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("controlplane up", flag.ExitOnError)
	state := fs.String("state", defaultState, "state directory")
	addr := fs.String("address", "127.0.0.1", "API server bind and advertise address")
	port := fs.Int("port", 0, "API server port (0: a free one)")
	e2e := fs.String("e2e", "", "the e2e module directory (default: found from the current directory)")
	version := fs.String("k8s-version", os.Getenv(k8sbin.VersionEnv), "the k8s.io/kubernetes release to run (default $"+k8sbin.VersionEnv+", else the one e2e/go.mod pins)")
	_ = fs.Parse(args)
	b, err := k8sbin.Ensure(ctx, k8sbin.Options{ModuleDir: *e2e, Version: *version})
	if err != nil {
		return err
	}
	cp, err := controlplane.Up(ctx, controlplane.Config{
		StateDir:      *state,
		BinDir:        b.Dir,
		Address:       *addr,
		APIServerPort: *port,
		Log:           os.Stderr,
	})
	if err != nil {
		return err
	}
	fmt.Printf("API server: %s\nexport KUBECONFIG=%s\nkubectl:    %s\nlogs:\n", cp.APIServerURL(), cp.AdminKubeconfig(), b.Tool("kubectl"))
	for _, f := range cp.LogFiles() {
		fmt.Printf("  %s\n", f)
	}
	return nil
}

func cpDown(args []string) error {
	fs := flag.NewFlagSet("controlplane down", flag.ExitOnError)
	state := fs.String("state", defaultState, "state directory")
	keepLogs := fs.Bool("keep-logs", false, "keep the log files")
	_ = fs.Parse(args)
	return controlplane.Down(*state, controlplane.DownOptions{
		StopOptions: controlplane.StopOptions{KeepLogs: *keepLogs},
		Log:         os.Stderr,
	})
}

func cpStatus(args []string) error {
	fs := flag.NewFlagSet("controlplane status", flag.ExitOnError)
	state := fs.String("state", defaultState, "state directory")
	_ = fs.Parse(args)
	s, err := controlplane.ReadState(*state)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Printf("no control plane in %s\n", *state)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Printf("API server: %s (since %s)\nkubeconfig: %s\n", s.APIServerURL, s.StartedAt.Format("2006-01-02 15:04:05"), s.AdminKubeconfig)
	for _, p := range s.Processes {
		st := "gone"
		if p.Alive() {
			st = "running"
		}
		fmt.Printf("  %-24s pid %-8d %-8s %s\n", p.Name, p.PID, st, p.LogPath)
	}
	return nil
}

func stateFlag(fs *flag.FlagSet) *string {
	return fs.String("state", cluster.DefaultStateDir(cluster.DefaultPrefix), "the lab's state directory")
}

func up(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	opts := cluster.Options{Log: os.Stderr}
	opts.BindFlags(fs)
	reuse := fs.Bool("reuse", false, "when a healthy lab with the same service proxy is up in the state directory, use it instead of refusing")
	_ = fs.Parse(args)
	if opts.StateDir == "" {
		opts.StateDir = cluster.DefaultStateDir(opts.Prefix)
	}
	if *reuse {
		if s, err := cluster.ReadState(opts.StateDir); err == nil {
			if err := cluster.CheckReuse(s, opts); err != nil {
				return err
			}
			fmt.Printf("reusing the lab in %s (%d nodes, service proxy %s, API server %s)\n", opts.StateDir, s.Nodes, s.ProxyOf(), s.APIServerURL)
			return nil
		}
	}
	start := time.Now()
	l, err := cluster.Up(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Printf("lab up in %s: %d nodes, service proxy %s, API server %s\n", l.Timings.Total, l.Nodes, l.Proxy, l.APIServerURL)
	if waited := time.Since(start) - l.Timings.Total - l.Timings.Programs; waited > time.Second {
		fmt.Printf("  (after %s building programs and %s waiting for another lab)\n", l.Timings.Programs, waited.Round(time.Millisecond))
	}
	fmt.Printf("  export KUBECONFIG=%s PATH=%s:$PATH   # the lab's kubectl\n", l.Kubeconfig, l.K8s.Dir)
	fmt.Printf("  herald-lab exec client -- curl -s http://%s:8080/   # from the LAN client\n", l.Layout.Nodes[0].IPv4)
	fmt.Printf("  herald-lab down\n")
	return nil
}

func down(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	state := stateFlag(fs)
	keepLogs := fs.Bool("keep-logs", false, "keep the logs in the state directory")
	_ = fs.Parse(args)
	start := time.Now()
	if _, err := cluster.ReadState(*state); errors.Is(err, os.ErrNotExist) {
		fmt.Printf("no lab in %s\n", *state)
		// A lab some killed run left up elsewhere goes too, if dead.
		gone, err := cluster.ReclaimDead(ctx, os.Stderr)
		if gone {
			fmt.Printf("dead lab taken down in %s\n", time.Since(start).Round(time.Millisecond))
		}
		return err
	}
	if err := cluster.Down(ctx, *state, cluster.DownOptions{KeepLogs: *keepLogs, Log: os.Stderr}); err != nil {
		return err
	}
	fmt.Printf("lab down in %s\n", time.Since(start).Round(time.Millisecond))
	return nil
}

func status(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("status", flag.ExitOnError)
	state := stateFlag(fs)
	_ = fs.Parse(args)
	s, err := cluster.ReadState(*state)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Printf("no lab in %s\n", *state)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Printf("lab %q (%s since %s): %d nodes, service proxy %s, API server %s\nkubeconfig: %s\n",
		s.Prefix, s.Phase, s.CreatedAt.Format("2006-01-02 15:04:05"), s.Nodes, s.ProxyOf(), s.APIServerURL, s.Kubeconfig)
	if cp, err := controlplane.ReadState(s.ControlPlaneDir); err == nil {
		for _, p := range cp.Processes {
			fmt.Printf("  %-26s pid %-8d %s\n", p.Name, p.PID, aliveWord(p.Alive()))
		}
	}
	for _, k := range s.Kubelets {
		fmt.Printf("  %-26s pid %-8d %s\n", "lab-kubelet "+k.Node, k.Process.PID, aliveWord(k.Process.Alive()))
	}
	for _, p := range s.FRR {
		fmt.Printf("  %-26s pid %-8d %s\n", "router "+p.Name, p.PID, aliveWord(p.Alive()))
	}
	l, err := s.Layout()
	if err != nil {
		return err
	}
	existing, err := topology.Observe(ctx)
	if err != nil {
		return err
	}
	missing := 0
	for _, ns := range l.Namespaces() {
		if !existing.Netns[ns] {
			fmt.Printf("  network namespace %s is missing\n", ns)
			missing++
		}
	}
	if missing == 0 {
		fmt.Printf("  network: %d namespaces on bridge %s\n", len(l.Namespaces()), l.Bridge)
	}
	out, err := s.KubectlClient().Output(ctx, "get", "nodes", "-o", "wide")
	if err != nil {
		return fmt.Errorf("kubectl get nodes: %w", err)
	}
	fmt.Print(out)
	return nil
}

func aliveWord(alive bool) string {
	if alive {
		return "running"
	}
	return "GONE"
}

// execIn runs a command in a lab namespace with the terminal attached and
// returns its exit code.
func execIn(ctx context.Context, args []string) (int, error) {
	s, l, rest, err := loadLab("exec", args)
	if err != nil {
		return 0, err
	}
	if len(rest) < 3 || rest[1] != "--" {
		usage()
	}
	ns, err := cluster.Netns(ctx, l, rest[0], cluster.KubectlPodLookup(s.KubectlClient()))
	if err != nil {
		return 0, err
	}
	return runAttached(ctx, ns, rest[2:])
}

// loadLab parses a subcommand's --state flag and reads the lab there; it
// returns the remaining arguments.
func loadLab(name string, args []string) (cluster.State, topology.Layout, []string, error) {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	state := stateFlag(fs)
	_ = fs.Parse(args)
	s, err := cluster.ReadState(*state)
	if err != nil {
		return s, topology.Layout{}, nil, fmt.Errorf("no lab in %s (herald-lab up first): %w", *state, err)
	}
	l, err := s.Layout()
	return s, l, fs.Args(), err
}

// runAttached runs a command in a namespace with the terminal attached
// and returns its exit code.
func runAttached(ctx context.Context, ns string, args []string) (int, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}

func printKubeconfig(args []string) error {
	s, _, _, err := loadLab("kubeconfig", args)
	if err != nil {
		return err
	}
	fmt.Println(s.Kubeconfig)
	return nil
}

// walk runs the source-IP walkthrough; it fails only on a FAIL (steps
// whose herald component is missing are NOT YET).
func walk(ctx context.Context, args []string) error {
	s, l, _, err := loadLab("walkthrough", args)
	if err != nil {
		return err
	}
	results := walkthrough.Run(ctx, s.WalkthroughEnv(l, os.Stdout))
	pass, fail, notYet := walkthrough.Summary(results)
	fmt.Printf("\nUsing Source IP in the lab: %d passed, %d failed, %d not yet possible\n", pass, fail, notYet)
	for _, r := range results {
		fmt.Printf("  %-8s %-22s %s\n", r.Verdict, r.Step, r.Detail)
	}
	if fail > 0 {
		return fmt.Errorf("%d step(s) failed", fail)
	}
	return nil
}

// vtysh runs FRR's shell against the lab router's instance.
func vtysh(ctx context.Context, args []string) (int, error) {
	s, l, rest, err := loadLab("vtysh", args)
	if err != nil {
		return 0, err
	}
	if s.FRRDir == "" {
		return 0, errors.New("this lab runs no FRR")
	}
	return runAttached(ctx, l.Router, append([]string{"vtysh", "--vty_socket", s.FRRDir}, rest...))
}
