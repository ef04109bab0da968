// Same GODEBUG defaults as the upstream Kubernetes binaries of this release
// (their go.mod says `godebug default=go1.24`).

//go:debug default=go1.24

// Command k8s is the lab's multi-call Kubernetes binary: kube-apiserver,
// kube-controller-manager, kube-scheduler, kube-proxy, kubelet (for real
// nodes) and kubectl from the k8s.io/kubernetes release pinned in
// e2e/go.mod, built with the upstream command constructors.
//
// The component is chosen by the name the binary is invoked as (a symlink
// named kube-apiserver, kubectl, ...) or, when invoked as k8s, by the first
// argument:
//
//	kube-apiserver --etcd-servers=...
//	k8s kube-apiserver --etcd-servers=...
//
// Only the selected component's command is constructed, so the components
// never share flag sets at run time. Build it through the lab's k8sbin
// package, which sets the version variables the upstream build would.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	_ "time/tzdata" // CronJob time zones in kube-controller-manager, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's client auth plugins
)

// components maps each name the binary answers to onto its entry point,
// which returns the process exit code.
var components = map[string]func() int{
	"kube-apiserver":          func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int { return cli.Run(controllermanager.NewControllerManagerCommand()) },
	"kube-scheduler":          func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kube-proxy":              func() int { return cli.Run(proxy.NewProxyCommand()) },
	"kubelet":                 runKubelet,
	"kubectl":                 runKubectl,
}

func runKubectl() int {
	kubectlEarlyVerbosity()
	command := kubectlcmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		kubectlutil.CheckErr(err) // prints the error and exits non-zero
	}
	return 0
}

// Names lists the component names, sorted.
func names() []string {
	var n []string
	for name := range components {
		n = append(n, name)
	}
	sort.Strings(n)
	return n
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := components[name]; !ok {
		// Invoked as "k8s" (or under any other name): the component is
		// the first argument, which is then dropped so that the
		// component's cobra command sees only its own arguments.
		if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
			usage(os.Stdout)
			if len(os.Args) < 2 {
				os.Exit(2)
			}
			os.Exit(0)
		}
		if os.Args[1] == "--list" {
			fmt.Println(strings.Join(names(), "\n"))
			os.Exit(0)
		}
		name = os.Args[1]
		if _, ok := components[name]; !ok {
			fmt.Fprintf(os.Stderr, "k8s: unknown component %q\n", name)
			usage(os.Stderr)
			os.Exit(2)
		}
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	os.Exit(components[name]())
}

func usage(w *os.File) {
	fmt.Fprintf(w, "usage: k8s COMPONENT [ARGS...]  (or invoke through a symlink named COMPONENT)\n")
	fmt.Fprintf(w, "       k8s --list\ncomponents:\n")
	for _, n := range names() {
		fmt.Fprintf(w, "  %s\n", n)
	}
}
