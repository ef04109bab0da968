package cluster

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/herald-lb/herald/e2e/lab/k8sbin"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// BindFlags defines `herald-lab up`'s flags for the options on fs. A bad
// --proxy fails the parse with a message naming the flag.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.Nodes, "nodes", DefaultNodes, fmt.Sprintf("number of nodes (1-%d)", topology.MaxNodes))
	fs.BoolVar(&o.Bare, "bare", false, "a cluster without herald (CRDs are still installed; with --proxy=herald no service proxy runs)")
	fs.BoolVar(&o.ImageMode, "image-mode", false, "run herald's pods from its image (podman's local storage, built by make image) under runc instead of the host's binary; also "+ImageModeEnv+"=1")
	fs.BoolVar(&o.RealNodes, "real-nodes", false, "run each node as users run theirs: the real kubelet with its own containerd, runc and CNI plugins; pods from images (make image, make e2e-images); also "+RealNodesEnv+"=1")
	fs.BoolVar(&o.DNS, "dns", false, "run the cluster DNS (CoreDNS as kubeadm installs it, Service kube-system/kube-dns) and point pods at it; needs --image-mode")
	fs.Func("proxy", "the service proxy: "+ProxyHerald+" (herald's own, in its speakers) or "+ProxyKubeProxy+
		" (kube-proxy as a DaemonSet, herald's speakers with --proxy=false); default $"+ProxyEnv+", else "+ProxyHerald, func(s string) (err error) {
		o.Proxy, err = ParseProxy(s)
		return err
	})
	fs.StringVar(&o.HeraldNamespace, "herald-namespace", HeraldNamespace, "where herald is installed: "+HeraldNamespace+", or with herald's proxy "+KubeSystem+", where kubeadm runs kube-proxy (the speakers' pods, the nodes' proxies, then carry k8s-app=kube-proxy)")
	fs.StringVar(&o.K8sVersion, "k8s-version", "", "the k8s.io/kubernetes release of the control plane, kubelet, kube-proxy and kubectl, e.g. v1.31.14 (built on first use); default $"+k8sbin.VersionEnv+", else the one e2e/go.mod pins")
	fs.StringVar(&o.Prefix, "prefix", DefaultPrefix, "starts the name of every namespace and link the lab makes")
	fs.StringVar(&o.StateDir, "state", "", "state directory (default /tmp/herald-lab/PREFIX)")
	fs.StringVar(&o.ModuleDir, "e2e", "", "the e2e module directory (default: found from the current directory)")
	fs.BoolVar(&o.WaitForOthers, "wait", false, "wait for another lab on this machine to go down instead of refusing")
}

// CheckReuse tells why the recorded lab s cannot serve for options o
// (`herald-lab up --reuse`): it is not healthy, or it runs another
// service proxy than o asks for (o.Proxy, else $HERALD_LAB_PROXY, else
// herald). Nil: use it.
func CheckReuse(s State, o Options) error {
	if bad := Unhealthy(s); len(bad) > 0 {
		return fmt.Errorf("the lab in %s is not healthy (%s): run herald-lab down, then up", s.StateDir, strings.Join(bad, ", "))
	}
	want, err := resolveProxy(o.Proxy, os.Getenv(ProxyEnv))
	if err != nil {
		return err
	}
	if got := s.ProxyOf(); got != want {
		return fmt.Errorf("the lab in %s runs the service proxy %s, not %s: run herald-lab down, then up", s.StateDir, got, want)
	}
	if want := heraldNamespace(o.HeraldNamespace); s.HeraldNS() != want {
		return fmt.Errorf("the lab in %s runs herald in %s, not %s: run herald-lab down, then up", s.StateDir, s.HeraldNS(), want)
	}
	wantK8s, err := resolveK8sVersion(o.K8sVersion, os.Getenv(k8sbin.VersionEnv))
	if err != nil {
		return err
	}
	gotK8s := s.K8sVersion
	if wantK8s == "" || gotK8s == "" {
		pinned, err := k8sbin.PinnedVersion(s.ModuleDir)
		if err != nil {
			return err
		}
		wantK8s, gotK8s = cmp.Or(wantK8s, pinned), cmp.Or(gotK8s, pinned)
	}
	if gotK8s != wantK8s {
		return fmt.Errorf("the lab in %s runs Kubernetes %s, not %s: run herald-lab down, then up", s.StateDir, gotK8s, wantK8s)
	}
	return nil
}

// resolveK8sVersion is the lab's Kubernetes release: opt
// (Options.K8sVersion) if set, else env (the value of k8sbin.VersionEnv);
// empty means the pinned one. A bad value's error names where it came
// from.
func resolveK8sVersion(opt, env string) (string, error) {
	v, from := opt, "cluster.Options.K8sVersion"
	if v == "" {
		v, from = env, k8sbin.VersionEnv
	}
	if v == "" {
		return "", nil
	}
	if _, _, err := k8sbin.ParseRelease(v); err != nil {
		return "", fmt.Errorf("%s: %w", from, err)
	}
	return v, nil
}
