// Command lab-kubelet runs the lab kubelet (package lab/kubelet) for one
// lab node until SIGTERM or SIGINT, then stops the node's pods and
// removes their network namespaces.
//
//	lab-kubelet --node-name=node1 --node-netns=hlab-node1 --node-ip=198.51.100.11 \
//	  --pod-cidr=198.18.1.0/24 --pod-gateway=198.18.1.1 --netns-prefix=hlab \
//	  --kubeconfig=node1.kubeconfig --state-dir=/tmp/herald-lab/node1 \
//	  --echoserver=e2e/_cache/lab/bin/echoserver --herald=e2e/_cache/lab/bin/herald \
//	  --kube-proxy=e2e/_cache/bin/kube-proxy --kubelet-version=v1.34.10
//
// With --image-mode it runs herald's pods from podman's local images
// under runc instead of the --herald binary; kube-proxy's image
// (registry.k8s.io/kube-proxy at --kubelet-version) is the --kube-proxy
// binary in both modes.
//
// `lab-kubelet down --state-dir=DIR` removes what a crashed kubelet left.
// `lab-kubelet mount-exec --bind SRC:DST... -- PROGRAM ARGS` is what the
// kubelet runs inside a container's mount namespace to mount its volumes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/herald-lb/herald/e2e/lab/kubelet"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == kubelet.MountExecCommand {
		// Only returns on failure; the container then exits with 127.
		err := kubelet.MountExec(os.Args[2:], os.Environ())
		fmt.Fprintln(os.Stderr, "lab-kubelet:", err)
		os.Exit(127)
	}
	if len(os.Args) > 1 && os.Args[1] == "down" {
		fs := flag.NewFlagSet("down", flag.ExitOnError)
		dir := fs.String("state-dir", "", "state directory of the kubelet")
		keepLogs := fs.Bool("keep-logs", false, "keep the containers' log files")
		_ = fs.Parse(os.Args[2:])
		if err := kubelet.Down(*dir, kubelet.DownOptions{KeepLogs: *keepLogs, Log: os.Stderr}); err != nil {
			fmt.Fprintln(os.Stderr, "lab-kubelet down:", err)
			os.Exit(1)
		}
		return
	}
	var cfg kubelet.Config
	kubelet.BindFlags(flag.CommandLine, &cfg)
	flag.Parse()
	cfg.Log = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := kubelet.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "lab-kubelet:", err)
		os.Exit(1)
	}
}
