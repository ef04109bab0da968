// Command herald-lab drives the lab: a Kubernetes cluster on one machine.
//
// So far it offers the control plane on its own:
//
//	herald-lab build                                  build or reuse the multi-call Kubernetes binary
//	herald-lab controlplane up   [--state DIR] [--address IP] [--port N]
//	herald-lab controlplane down [--state DIR] [--keep-logs]
//	herald-lab controlplane status [--state DIR]
//
// `up` leaves the processes running and returns; `down` stops them by the
// PIDs in the state file, also after a crash, and removes the files.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/herald-lb/herald/e2e/lab/controlplane"
	"github.com/herald-lb/herald/e2e/lab/k8sbin"
)

const defaultState = "/tmp/herald-lab/controlplane"

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  herald-lab build [--e2e DIR]
  herald-lab controlplane up     [--state DIR] [--address IP] [--port N] [--e2e DIR]
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
	_ = fs.Parse(args)
	b, err := k8sbin.Ensure(ctx, k8sbin.Options{ModuleDir: *e2e})
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
	_ = fs.Parse(args)
	b, err := k8sbin.Ensure(ctx, k8sbin.Options{ModuleDir: *e2e})
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
