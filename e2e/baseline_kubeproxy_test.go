package e2e

// This file's name sorts before the other tests': go test runs a
// package's tests in file order, and this test brings up a lab of its
// own, which first takes the shared lab down (one lab per machine), so
// running first spares the shared lab a restart.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/kubelet"
)

// kubeProxyObjects are the kube-proxy lab's objects besides l2Objects'
// pool, advertisement and echo server kp-echo on node1: a client pod on
// node2 and the echo server behind a ClusterIP, a NodePort and a
// LoadBalancer Service.
func kubeProxyObjects() string {
	objs := []string{`apiVersion: v1
kind: Pod
metadata: {name: kp-client, namespace: default}
spec:
  nodeName: node2
  containers: [{name: client, image: registry.k8s.io/echoserver:1.4}]
`}
	for name, typ := range map[string]string{"kp-clusterip": "ClusterIP", "kp-nodeport": "NodePort", "kp-lb": "LoadBalancer"} {
		objs = append(objs, fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %s, namespace: default}
spec:
  type: %s
  selector: {app: kp-echo}
  ports: [{name: http, port: 80, targetPort: 8080}]
`, name, typ))
	}
	return strings.Join(objs, "---\n")
}

// TestKubeProxyLab brings up a 2-node lab whose service proxy is
// kube-proxy (the reference side of the upstream conformance run, issue
// #14) and checks that it is one: kube-proxy runs on every node, its
// rules and no herald rules are in the nodes' namespaces, ClusterIP and
// NodePort Services answer through it, and herald, with its proxy off,
// still gives a LoadBalancer Service an IP that answers from the LAN
// client through kube-proxy's rules.
func TestKubeProxyLab(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	h := harness.UpOwnLab(t, ctx, cluster.Options{Prefix: "hkp", Nodes: 2, Proxy: cluster.ProxyKubeProxy})
	if h.Lab.Proxy != cluster.ProxyKubeProxy {
		t.Fatalf("the lab records the proxy %q", h.Lab.Proxy)
	}
	t.Logf("TIMING lab up: %s in all, kube-proxy %s, herald %s", h.Lab.Timings.Total, h.Lab.Timings.KubeProxy, h.Lab.Timings.Herald)

	t.Run("kube-proxy runs on every node", func(t *testing.T) {
		pods, err := h.CS.CoreV1().Pods(cluster.KubeProxyNamespace).List(ctx, metav1.ListOptions{LabelSelector: cluster.KubeProxySelector})
		if err != nil {
			t.Fatal(err)
		}
		image := kubelet.KubeProxyImageName(h.Lab.K8s.Version)
		nodes := map[string]bool{}
		for _, p := range pods.Items {
			if p.Status.Phase != v1.PodRunning || !harness.PodReady(&p) || p.Spec.Containers[0].Image != image {
				t.Errorf("%s on %s: %s ready=%v image %s, want Running, ready, %s", p.Name, p.Spec.NodeName, p.Status.Phase, harness.PodReady(&p), p.Spec.Containers[0].Image, image)
			}
			nodes[p.Spec.NodeName] = true
		}
		if len(pods.Items) != 2 || !nodes["node1"] || !nodes["node2"] {
			t.Errorf("want one kube-proxy pod on node1 and one on node2, got %d on %v", len(pods.Items), nodes)
		}
		for _, n := range h.Layout.Nodes {
			if code, body := curlCode(h, n.Name, "http://127.0.0.1:10249/proxyMode"); code != 200 || body != "iptables" {
				t.Errorf("%s: kube-proxy's /proxyMode answers %d %q, want iptables", n.Name, code, body)
			}
			if code, body := curlCode(h, n.Name, "http://"+n.IPv4.String()+":10256/healthz"); code != 200 {
				t.Errorf("%s: kube-proxy's /healthz answers %d %q", n.Name, code, body)
			}
		}
		ds, err := h.CS.AppsV1().DaemonSets(cluster.HeraldNamespace).Get(ctx, cluster.HeraldSpeaker, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if args := strings.Join(ds.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--proxy=false") {
			t.Errorf("herald's speakers run %q, want --proxy=false", args)
		}
	})

	h.Apply(l2Objects("kp-echo", "198.51.100.200-198.51.100.209", "2001:db8:0:1::200-2001:db8:0:1::209", "node1"))
	h.Apply(kubeProxyObjects())
	applied := time.Now()
	h.ReadyPods("app=kp-echo", 1, 90*time.Second)
	var client *v1.Pod
	h.Poll(90*time.Second, "kp-client running", func() (bool, string) {
		client = h.Pod("kp-client")
		return client.Status.Phase == v1.PodRunning && client.Status.PodIP != "", string(client.Status.Phase)
	})

	t.Run("ClusterIP from a pod on the other node keeps the pod's address", func(t *testing.T) {
		url := "http://" + clusterIP(h, "kp-clusterip") + "/"
		d := waitEcho(h, podNetns(h, "kp-client"), url, client.Status.PodIP)
		t.Logf("TIMING ClusterIP answers %s after the objects were applied (%s after the wait began)", time.Since(applied).Round(time.Millisecond), d.Round(time.Millisecond))
	})

	t.Run("NodePort from the LAN client answers on every node", func(t *testing.T) {
		port := nodePort(h, "kp-nodeport")
		for _, n := range h.Layout.Nodes {
			page := waitPage(h, h.Layout.Client, fmt.Sprintf("http://%s:%d/", n.IPv4, port))
			if got := clientAddr(page); !nodeOwned(h.Layout, got) {
				t.Errorf("via %s: client_address=%s, want a node's address (kube-proxy masquerades external traffic under Cluster)", n.Name, got)
			}
		}
	})

	t.Run("LoadBalancer IP from herald answers through kube-proxy", func(t *testing.T) {
		ip := ctl{h}.waitAnyIP("default", "kp-lb")
		if !strings.HasPrefix(ip, "198.51.100.20") {
			t.Fatalf("kp-lb got %q, want an IP of the pool kp-echo", ip)
		}
		for _, n := range h.Layout.Nodes {
			out, err := h.Exec(n.Name, "iptables", "-w", "-t", "nat", "-S", "KUBE-SERVICES")
			if err != nil || !strings.Contains(out, "-d "+ip+"/32") || !strings.Contains(out, "default/kp-lb:http loadbalancer IP") {
				t.Errorf("%s: KUBE-SERVICES has no rule for %s (%v):\n%s", n.Name, ip, err, out)
			}
		}
		start := time.Now()
		page := waitPage(h, h.Layout.Client, "http://"+ip+"/")
		t.Logf("TIMING %s answers from the client after %s; client_address=%s", ip, time.Since(start).Round(time.Millisecond), clientAddr(page))
		if got := clientAddr(page); !nodeOwned(h.Layout, got) {
			t.Errorf("client_address=%s, want a node's address (kube-proxy masquerades external traffic under Cluster)", got)
		}
	})

	t.Run("kube-proxy's chains and none of herald's in both families", func(t *testing.T) {
		for _, n := range h.Layout.Nodes {
			for _, save := range []string{"iptables-save", "ip6tables-save"} {
				out, err := h.Exec(n.Name, save)
				if err != nil {
					t.Fatalf("%s: %s: %v", n.Name, save, err)
				}
				if !strings.Contains(out, ":KUBE-SERVICES ") || !strings.Contains(out, ":KUBE-NODEPORTS ") {
					t.Errorf("%s: %s has no KUBE-SERVICES or KUBE-NODEPORTS chain", n.Name, save)
				}
				if strings.Contains(out, "HERALD-") {
					t.Errorf("%s: %s shows herald's chains:\n%s", n.Name, save, out)
				}
			}
		}
	})
}
