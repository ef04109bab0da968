package cluster

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/herald-lb/herald/e2e/lab/kubelet"
	"github.com/herald-lb/herald/e2e/lab/netns"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// The service proxies a lab can run (Options.Proxy).
const (
	// ProxyHerald is herald's own proxy, in the speaker's process
	// (config/deploy); a bare lab then has no proxy at all.
	ProxyHerald = "herald"
	// ProxyKubeProxy is upstream kube-proxy (iptables mode) as a
	// DaemonSet in kube-system; herald, unless the lab is bare, runs
	// with its proxy off (config/overlays/no-proxy).
	ProxyKubeProxy = "kube-proxy"
)

// Where the lab puts kube-proxy, as kubeadm names it.
const (
	KubeProxyNamespace = "kube-system"
	KubeProxyName      = "kube-proxy"
	// KubeProxySelector selects its pods.
	KubeProxySelector = "k8s-app=kube-proxy"
)

// ParseProxy checks a proxy name: herald or kube-proxy.
func ParseProxy(s string) (string, error) {
	switch s {
	case ProxyHerald, ProxyKubeProxy:
		return s, nil
	}
	return "", fmt.Errorf("unknown service proxy %q: want %s or %s", s, ProxyHerald, ProxyKubeProxy)
}

// resolveProxy is the lab's proxy: opt (Options.Proxy) if set, else env
// (the value of ProxyEnv) if set, else herald. A bad value's error names
// where it came from.
func resolveProxy(opt, env string) (string, error) {
	if opt != "" {
		p, err := ParseProxy(opt)
		if err != nil {
			return "", fmt.Errorf("cluster.Options.Proxy: %w", err)
		}
		return p, nil
	}
	if env != "" {
		p, err := ParseProxy(env)
		if err != nil {
			return "", fmt.Errorf("%s=%s: %w", ProxyEnv, env, err)
		}
		return p, nil
	}
	return ProxyHerald, nil
}

// ProxyOf is the proxy a recorded lab runs (labs recorded before the
// choice existed ran herald's).
func (s *State) ProxyOf() string {
	if s.Proxy == "" {
		return ProxyHerald
	}
	return s.Proxy
}

// NoProxyDir is config/overlays/no-proxy of the root module: herald's
// install with the speakers' proxy off.
func NoProxyDir(e2eModuleDir string) string {
	return filepath.Join(e2eModuleDir, "..", "config", "overlays", "no-proxy")
}

// KubeProxyManifest is what the lab applies to run kube-proxy on every
// node as a real cluster does (kubeadm's shape, with flags instead of a
// configuration file): the ServiceAccount kube-proxy bound to the
// built-in ClusterRole system:node-proxier, and a privileged hostNetwork
// DaemonSet of image registry.k8s.io/kube-proxy:<version>. The lab's
// `kubernetes` Service has no proxy behind it until kube-proxy runs, so
// KUBERNETES_SERVICE_HOST and _PORT give the in-cluster client the API
// server itself. kube-proxy writes its default conntrack timeouts, which
// are each node namespace's own; --conntrack-max-per-core=0 leaves the
// table's size, which only the host's namespace may change (kube-proxy
// exits when it cannot write it). healthz is kube-proxy's usual 0.0.0.0:10256 and metrics
// 127.0.0.1:10249 (herald's speaker without its proxy uses neither).
func KubeProxyManifest(version, apiServerURL string, clusterCIDRs []string) (string, error) {
	u, err := url.Parse(apiServerURL)
	if err != nil || u.Hostname() == "" || u.Port() == "" {
		return "", fmt.Errorf("the API server URL %q has no host and port", apiServerURL)
	}
	if version == "" || len(clusterCIDRs) == 0 {
		return "", fmt.Errorf("kube-proxy needs a version (%q) and the cluster CIDRs (%v)", version, clusterCIDRs)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata:
  name: %[2]s
  namespace: %[1]s
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: herald-lab:node-proxier
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:node-proxier
subjects:
  - kind: ServiceAccount
    name: %[2]s
    namespace: %[1]s
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: %[2]s
  namespace: %[1]s
  labels: {k8s-app: kube-proxy}
spec:
  selector:
    matchLabels: {k8s-app: kube-proxy}
  updateStrategy: {type: RollingUpdate}
  template:
    metadata:
      labels: {k8s-app: kube-proxy}
    spec:
      serviceAccountName: %[2]s
      priorityClassName: system-node-critical
      hostNetwork: true
      nodeSelector: {kubernetes.io/os: linux}
      tolerations: [{operator: Exists}]
      containers:
        - name: kube-proxy
          image: %[3]s
          command:
            - /usr/local/bin/kube-proxy
            - --hostname-override=$(NODE_NAME)
            - --proxy-mode=iptables
            - --cluster-cidr=%[4]s
            - --healthz-bind-address=0.0.0.0:10256
            - --metrics-bind-address=127.0.0.1:10249
            - --conntrack-max-per-core=0
          env:
            - name: NODE_NAME
              valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
            - {name: KUBERNETES_SERVICE_HOST, value: %[5]q}
            - {name: KUBERNETES_SERVICE_PORT, value: %[6]q}
          securityContext: {privileged: true}
          volumeMounts:
            - {name: xtables-lock, mountPath: /run/xtables.lock}
            - {name: lib-modules, mountPath: /lib/modules, readOnly: true}
      volumes:
        - name: xtables-lock
          hostPath: {path: /run/xtables.lock, type: FileOrCreate}
        - name: lib-modules
          hostPath: {path: /lib/modules}
`, KubeProxyNamespace, KubeProxyName, kubelet.KubeProxyImageName(version), strings.Join(clusterCIDRs, ","), u.Hostname(), u.Port()), nil
}

// clusterCIDRs are the lab's pod networks, IPv4 first.
func clusterCIDRs() []string {
	return []string{topology.ClusterCIDR.String(), topology.ClusterCIDRv6.String()}
}

// installKubeProxy runs kube-proxy on every node and returns once the
// DaemonSet has rolled out and each node's kube-proxy has written the
// `kubernetes` Service's rule (Ready alone says little: kube-proxy has
// no readiness probe, as in kubeadm's DaemonSet, and its /healthz is
// healthy before the first sync).
func (l *Lab) installKubeProxy(ctx context.Context) error {
	start := time.Now()
	m, err := KubeProxyManifest(l.K8s.Version, l.APIServerURL, clusterCIDRs())
	if err != nil {
		return err
	}
	k := l.kubectlClient()
	if _, err := k.RunStdin(ctx, strings.NewReader(m), "apply", "-f", "-"); err != nil {
		return err
	}
	if _, err := k.Run(ctx, "-n", KubeProxyNamespace, "rollout", "status", "--timeout=120s", "daemonset/"+KubeProxyName); err != nil {
		return fmt.Errorf("kube-proxy did not become ready on every node: %w", err)
	}
	svc, err := k.Output(ctx, "-n", "default", "get", "service", "kubernetes", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		return err
	}
	for _, n := range l.Layout.Nodes {
		if err := waitServiceRule(ctx, n.Netns, strings.TrimSpace(svc), time.Minute); err != nil {
			return fmt.Errorf("kube-proxy on %s: %w", n.Name, err)
		}
	}
	l.logf("kube-proxy %s running on %d nodes in %s", l.K8s.Version, len(l.Layout.Nodes), since(start))
	return nil
}

// waitServiceRule waits until the nat chain KUBE-SERVICES in the node's
// namespace sends the ClusterIP ip somewhere.
func waitServiceRule(ctx context.Context, ns, ip string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		out, err := netns.Run(ctx, ns, "iptables", "-w", "-t", "nat", "-S", "KUBE-SERVICES")
		if err == nil && strings.Contains(out, "-d "+ip+"/32") {
			return nil
		}
		last = strings.TrimSpace(out)
		if err != nil {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no KUBE-SERVICES rule for %s after %s: %s", ip, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
