package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/labbin"
	"github.com/herald-lb/herald/e2e/lab/netns"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// The proxy tests' objects, all in default and named px-*: an echo
// server on node1 behind ClusterIP, NodePort and LoadBalancer (Local)
// Services; client pods on node1 and node2; three echo servers behind a
// Service with ClientIP affinity and one without; a UDP echo server; a
// Service without endpoints.
const proxyObjects = `apiVersion: apps/v1
kind: Deployment
metadata: {name: px-app, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: px-app}}
  template:
    metadata: {labels: {app: px-app}}
    spec:
      nodeSelector: {kubernetes.io/hostname: node1}
      containers: [{name: echo, image: registry.k8s.io/echoserver:1.4}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: px-multi, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: px-multi}}
  template:
    metadata: {labels: {app: px-multi}}
    spec:
      containers: [{name: echo, image: registry.k8s.io/echoserver:1.4}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: px-udp, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: px-udp}}
  template:
    metadata: {labels: {app: px-udp}}
    spec:
      nodeSelector: {kubernetes.io/hostname: node3}
      containers:
        - name: echo
          image: registry.k8s.io/echoserver:1.4
          env: [{name: ECHOSERVER_UDP_PORT, value: "9053"}]
---
apiVersion: v1
kind: Pod
metadata: {name: px-client-1, namespace: default, labels: {app: px-client}}
spec:
  nodeName: node1
  containers: [{name: client, image: registry.k8s.io/echoserver:1.4}]
---
apiVersion: v1
kind: Pod
metadata: {name: px-client-2, namespace: default, labels: {app: px-client}}
spec:
  nodeName: node2
  containers: [{name: client, image: registry.k8s.io/echoserver:1.4}]
---
apiVersion: v1
kind: Service
metadata: {name: px-clusterip, namespace: default}
spec:
  selector: {app: px-app}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: px-nodeport, namespace: default}
spec:
  type: NodePort
  selector: {app: px-app}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: px-local, namespace: default}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  selector: {app: px-app}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: px-sticky, namespace: default}
spec:
  selector: {app: px-multi}
  sessionAffinity: ClientIP
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: px-spread, namespace: default}
spec:
  selector: {app: px-multi}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: px-udp, namespace: default}
spec:
  selector: {app: px-udp}
  ports: [{name: dns, port: 53, targetPort: 9053, protocol: UDP}]
---
apiVersion: v1
kind: Service
metadata: {name: px-empty, namespace: default}
spec:
  type: NodePort
  selector: {app: px-nothing}
  ports: [{name: http, port: 80, targetPort: 8080}]
`

// TestProxy checks `herald proxy`, as installed by config/deploy, with
// real traffic in the lab: the "Using Source IP" outcomes for ClusterIP
// and NodePort, healthCheckNodePort, /proxyMode, REJECT without
// endpoints, session affinity, UDP across a pod replacement, --cleanup
// and the canary, and the rules as `iptables -L` shows them.
func TestProxy(t *testing.T) {
	proxySuite(t, harness.Start(t), "iptables")
}

// TestProxyNFTables is TestProxy with the proxy in the nftables mode
// (the speakers run it in-process with --proxy-mode=nftables for the
// test): the same traffic outcomes, and the table as `nft list` shows it
// where the iptables mode checks `iptables -L`.
func TestProxyNFTables(t *testing.T) {
	h := harness.Start(t)
	l2{h}.speakerArgs([]string{"--proxy-mode=nftables"})
	proxySuite(t, h, "nftables")
}

// proxyChecks is what proxySuite's steps share.
type proxyChecks struct {
	// mode is the proxy's mode, iptables or nftables.
	mode    string
	nftMode bool
	// applied is when the objects were applied.
	applied time.Time
	// podIP is the client pods' addresses by name.
	podIP map[string]string
}

// proxySuite runs TestProxy's steps with the proxy in mode.
func proxySuite(t *testing.T, h *harness.T, mode string) {
	nftMode := mode == "nftables"
	t.Cleanup(func() { cleanupProxyObjects(h) })
	applied := time.Now()
	h.Apply(proxyObjects)
	h.ReadyPods("app=px-app", 1, 90*time.Second)
	clients, _ := h.ReadyPods("app=px-client", 2, 90*time.Second)
	h.ReadyPods("app=px-multi", 3, 90*time.Second)
	h.ReadyPods("app=px-udp", 1, 90*time.Second)
	podIP := map[string]string{}
	for _, p := range clients {
		podIP[p.Name] = p.Status.PodIP
	}
	pc := &proxyChecks{mode: mode, nftMode: nftMode, applied: applied, podIP: podIP}

	t.Run("ClusterIP keeps the client pod's address", pc.checkClusterIPSourceIP)
	t.Run("hairpin: the Service's only pod reaches itself through it, masqueraded", pc.checkHairpin)
	t.Run("NodePort Cluster from the LAN: every node answers with a node address", pc.checkNodePortCluster)
	t.Run("NodePort Local: only the endpoint's node answers, with the client's address", pc.checkNodePortLocal)
	t.Run("healthCheckNodePort: 200 with one local endpoint only where the pod runs", pc.checkHealthCheckNodePort)
	t.Run("proxyMode, healthz and metrics on every node", pc.checkProxyEndpoints)
	t.Run("no endpoints: connections are refused at once", pc.checkNoEndpointsRejected)
	t.Run("session affinity: one client sticks to one pod", pc.checkSessionAffinity)

	t.Run("UDP: a replaced pod is reached without waiting for conntrack to expire", func(t *testing.T) {
		h := harness.Start(t)
		udpEcho(h, podNetns(h, "px-client-1"), clusterIP(h, "px-udp"))
	})

	t.Run("herald proxy --cleanup, then the canary brings the rules back", pc.checkCleanupAndCanary)
	t.Run("nft list table ip herald: the dispatch map, the endpoints map and the hairpin set", pc.checkNFTablesListing)
	t.Run("iptables -t nat -L reads like the Kubernetes docs", pc.checkIPTablesListing)

	// Last: it restarts the speakers with the flag and back.
	t.Run("--nodeport-addresses: NodePorts on the LAN address only, not on the pod bridge's", pc.checkNodePortAddresses)
}

// checkClusterIPSourceIP checks that a ClusterIP connection from either
// client pod keeps the pod's address.
func (pc *proxyChecks) checkClusterIPSourceIP(t *testing.T) {
	h := harness.Start(t)
	url := "http://" + clusterIP(h, "px-clusterip") + "/"
	for _, c := range []string{"px-client-1", "px-client-2"} { // same node as the pod, another node
		d := waitEcho(h, podNetns(h, c), url, pc.podIP[c])
		t.Logf("TIMING %s: ClusterIP answers %s after the objects were applied (%s after the wait began)", c, time.Since(pc.applied).Round(time.Millisecond), d.Round(time.Millisecond))
	}
}

// checkHairpin checks a pod reaching itself through its Service: answered,
// from a node address.
func (pc *proxyChecks) checkHairpin(t *testing.T) {
	h := harness.Start(t)
	pods, _ := h.ReadyPods("app=px-app", 1, 30*time.Second)
	self := pods[0]
	url := "http://" + clusterIP(h, "px-clusterip") + "/"
	var page string
	h.Poll(30*time.Second, "GET "+url+" from "+self.Name+" itself", func() (bool, string) {
		var err error
		page, err = getFrom(podNetns(h, self.Name), url)
		return err == nil, fmt.Sprint(err)
	})
	// Its own address would make the pod answer itself outside the
	// connection (the reply never un-DNATed): a node address it is.
	if got := clientAddr(page); got == self.Status.PodIP || !nodeOwned(h.Layout, got) {
		t.Errorf("hairpin client_address=%s, want a node address (pod %s)", got, self.Status.PodIP)
	}
	t.Logf("hairpin from %s (%s): client_address=%s", self.Name, self.Status.PodIP, clientAddr(page))
}

// checkNodePortCluster checks that every node answers a Cluster NodePort,
// SNATed to a node address.
func (pc *proxyChecks) checkNodePortCluster(t *testing.T) {
	h := harness.Start(t)
	port := nodePort(h, "px-nodeport")
	for _, n := range h.Layout.Nodes {
		url := fmt.Sprintf("http://%s:%d/", n.IPv4, port)
		page := waitPage(h, h.Layout.Client, url)
		got := clientAddr(page)
		if !nodeOwned(h.Layout, got) {
			t.Errorf("via %s: client_address=%s, want an address of a node (SNAT)", n.Name, got)
		}
		t.Logf("via %s: client_address=%s", n.Name, got)
	}
}

// checkNodePortLocal checks that only the endpoint's node answers a Local
// NodePort, with the client's own address; the others drop.
func (pc *proxyChecks) checkNodePortLocal(t *testing.T) {
	h := harness.Start(t)
	port := nodePort(h, "px-local")
	for _, n := range h.Layout.Nodes {
		addr := net.JoinHostPort(n.IPv4.String(), strconv.Itoa(port))
		if n.Name == "node1" {
			d := waitEcho(h, h.Layout.Client, "http://"+addr+"/", topology.ClientV4.String())
			t.Logf("TIMING NodePort Local answers on node1 after %s", d.Round(time.Millisecond))
			continue
		}
		start := time.Now()
		_, err := dialFrom(h.Layout.Client, "tcp", addr, time.Second)
		var ne net.Error
		if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("via %s: %v after %s, want a timeout (packets dropped)", n.Name, err, time.Since(start).Round(time.Millisecond))
		}
	}
}

// checkHealthCheckNodePort checks the healthCheckNodePort of every node.
func (pc *proxyChecks) checkHealthCheckNodePort(t *testing.T) {
	h := harness.Start(t)
	svc, err := h.CS.CoreV1().Services("default").Get(h.Ctx, "px-local", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hcnp := svc.Spec.HealthCheckNodePort
	if hcnp == 0 {
		t.Fatal("px-local has no healthCheckNodePort")
	}
	for _, n := range h.Layout.Nodes {
		wantCode, wantLocal := 503, 0
		if n.Name == "node1" {
			wantCode, wantLocal = 200, 1
		}
		url := fmt.Sprintf("http://localhost:%d/healthz", hcnp)
		var code int
		var body string
		h.Poll(30*time.Second, "healthz on "+n.Name, func() (bool, string) {
			code, body = curlCode(h, n.Name, url)
			return code == wantCode, fmt.Sprintf("%d %s", code, body)
		})
		var r struct {
			Service struct {
				Namespace, Name string
			} `json:"service"`
			LocalEndpoints      int  `json:"localEndpoints"`
			ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("%s: %q: %v", n.Name, body, err)
		}
		if r.LocalEndpoints != wantLocal || !r.ServiceProxyHealthy || r.Service.Name != "px-local" || r.Service.Namespace != "default" {
			t.Errorf("%s: %d %s", n.Name, code, body)
		}
		t.Logf("[%s]$ curl localhost:%d/healthz -> %d %s", n.Name, hcnp, code, strings.TrimSpace(body))
	}
}

// checkProxyEndpoints checks /proxyMode, /healthz and /metrics on every node.
func (pc *proxyChecks) checkProxyEndpoints(t *testing.T) {
	h := harness.Start(t)
	for _, n := range h.Layout.Nodes {
		if code, body := curlCode(h, n.Name, "http://localhost:10249/proxyMode"); code != 200 || body != pc.mode {
			t.Errorf("%s: /proxyMode %d %q, want %s", n.Name, code, body, pc.mode)
		}
		if code, body := curlCode(h, n.Name, "http://localhost:10256/healthz"); code != 200 || !strings.Contains(body, "lastUpdated") {
			t.Errorf("%s: /healthz %d %q", n.Name, code, body)
		}
		_, metrics := curlCode(h, n.Name, "http://localhost:10249/metrics")
		for _, m := range []string{"herald_proxy_sync_proxy_rules_duration_seconds_count", "herald_proxy_sync_full_proxy_rules_duration_seconds_count",
			"herald_proxy_sync_proxy_rules_last_timestamp_seconds", `herald_proxy_sync_proxy_rules_iptables_total{table="nat"}`} {
			if !strings.Contains(metrics, m) {
				t.Errorf("%s: /metrics has no %s", n.Name, m)
			}
		}
	}
}

// checkNoEndpointsRejected checks that a Service without endpoints refuses
// at once, by herald's REJECT.
func (pc *proxyChecks) checkNoEndpointsRejected(t *testing.T) {
	h := harness.Start(t)
	cip := clusterIP(h, "px-empty")
	addr := net.JoinHostPort(cip, "80")
	// Without the proxy's REJECT a cluster IP leads nowhere and the
	// connection times out; with it, it is refused.
	var took time.Duration
	var err error
	h.Poll(30*time.Second, "the cluster IP to refuse", func() (bool, string) {
		start := time.Now()
		_, err = dialFrom(podNetns(h, "px-client-2"), "tcp", addr, 3*time.Second)
		took = time.Since(start)
		return errors.Is(err, syscall.ECONNREFUSED), fmt.Sprint(err)
	})
	t.Logf("TIMING connection to a cluster IP without endpoints refused in %s", took.Round(time.Microsecond))
	if took > 500*time.Millisecond {
		t.Errorf("refused only after %s", took)
	}
	// The same from the LAN through a NodePort; a closed port would be
	// refused too, so the REJECT rule's counter must show it was ours.
	np := nodePort(h, "px-empty")
	naddr := net.JoinHostPort(h.Node("node2").IPv4.String(), strconv.Itoa(np))
	if _, err := dialFrom(h.Layout.Client, "tcp", naddr, 3*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("NodePort without endpoints: %v, want connection refused", err)
	}
	if pc.nftMode {
		out, err := h.Exec("node2", "nft", "list", "chain", "ip", "herald", "reject-chain")
		if err != nil {
			t.Fatal(err)
		}
		if n := nftCounter(out); n < 2 {
			t.Errorf("node2's reject-chain counted %d packets, want the 2 above at least:\n%s", n, out)
		}
		return
	}
	for _, c := range []struct{ node, chain string }{{"node2", "HERALD-SERVICES"}, {"node2", "HERALD-EXTERNAL-SERVICES"}} {
		out, err := h.Exec(c.node, "iptables", "-t", "filter", "-L", c.chain, "-n", "-v", "-x")
		if err != nil {
			t.Fatal(err)
		}
		if n := rejectCount(out, "default/px-empty:http has no endpoints"); n == 0 {
			t.Errorf("%s filter %s: no REJECT counted for px-empty:\n%s", c.node, c.chain, out)
		}
	}
}

// checkSessionAffinity checks that ClientIP affinity keeps a client on one
// pod, where a plain Service spreads.
func (pc *proxyChecks) checkSessionAffinity(t *testing.T) {
	h := harness.Start(t)
	sticky, spread := clusterIP(h, "px-sticky"), clusterIP(h, "px-spread")
	from := podNetns(h, "px-client-1")
	waitEcho(h, from, "http://"+sticky+"/", pc.podIP["px-client-1"])
	waitEcho(h, from, "http://"+spread+"/", pc.podIP["px-client-1"])
	for range 20 {
		for _, ip := range []string{sticky, spread} {
			// A first connection to a pod that was just started has
			// once (in a full-suite run) timed out; it is retried and
			// shown rather than hidden. Conntrack records the DNAT
			// target of failed attempts too.
			var err error
			for try := 0; try < 3; try++ {
				if _, err = getFrom(from, "http://"+ip+"/"); err == nil {
					break
				}
				t.Logf("GET http://%s/ from %s: %v (retrying)", ip, from, err)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// The client's node's conntrack table tells where each connection
	// was DNATed to: the reply's source.
	stickyPods, spreadPods := dnatTargets(h, "node1", sticky), dnatTargets(h, "node1", spread)
	t.Logf("ClientIP affinity: %v; without: %v", stickyPods, spreadPods)
	if len(stickyPods) != 1 {
		t.Errorf("with sessionAffinity ClientIP one client reached %d pods: %v", len(stickyPods), stickyPods)
	}
	if len(spreadPods) < 2 {
		t.Errorf("without affinity 20 connections reached only %v: the check cannot tell", spreadPods)
	}
}

// checkCleanupAndCanary checks that --cleanup removes herald's rules only,
// and that the next change rewrites them.
func (pc *proxyChecks) checkCleanupAndCanary(t *testing.T) {
	h := harness.Start(t)
	node := h.Node("node3")
	url := fmt.Sprintf("http://%s:%d/", node.IPv4, nodePort(h, "px-nodeport"))
	waitPage(h, h.Layout.Client, url)
	// What is not herald's (kubelet's chains, on real nodes the CNI
	// plugins') is left as it was.
	foreign := harness.ForeignRules(h.Ctx, node.Netns)
	// What an admin (or another tool flushing the tables) would do.
	if out, err := h.Exec("node3", h.Lab.Bins.Path(labbin.Herald), "proxy", "--cleanup"); err != nil {
		t.Fatalf("herald proxy --cleanup: %v\n%s", err, out)
	}
	gone, added := harness.DiffRules(foreign, harness.ForeignRules(h.Ctx, node.Netns))
	t.Logf("node3: %d rules and chains not herald's before --cleanup, %d gone and %d added after", len(foreign), len(gone), len(added))
	if len(gone) > 0 || len(added) > 0 {
		t.Errorf("--cleanup changed rules not herald's:\ngone:\n%s\nadded:\n%s", strings.Join(gone, "\n"), strings.Join(added, "\n"))
	}
	for _, table := range []string{"nat", "filter", "mangle"} {
		out, err := h.Exec("node3", "iptables-save", "-t", table)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "HERALD") {
			t.Errorf("after --cleanup, %s still has herald's rules:\n%s", table, out)
		}
	}
	if out, err := h.Exec("node3", "nft", "list", "tables"); err != nil || strings.Contains(out, "herald") {
		t.Errorf("after --cleanup, nft list tables: %v\n%s", err, out)
	}
	if _, err := getFrom(h.Layout.Client, url); err == nil {
		t.Fatalf("%s still answers without rules", url)
	}
	// The next change finds the canary gone and rewrites everything.
	changed := time.Now()
	h.Apply("apiVersion: v1\nkind: Service\nmetadata: {name: px-touch, namespace: default}\nspec:\n  selector: {app: px-app}\n  ports: [{port: 80, targetPort: 8080}]\n")
	waitPage(h, h.Layout.Client, url)
	t.Logf("TIMING node3's rules rewritten %s after a change found the canary gone", time.Since(changed).Round(time.Millisecond))
}

// checkNFTablesListing checks the nftables mode's table as nft lists it.
func (pc *proxyChecks) checkNFTablesListing(t *testing.T) {
	if !pc.nftMode {
		t.Skip("the iptables mode")
	}
	h := harness.Start(t)
	table, err := h.Exec("node1", "nft", "list", "table", "ip", "herald")
	if err != nil {
		t.Fatal(err)
	}
	cip, spread := clusterIP(h, "px-clusterip"), clusterIP(h, "px-spread")
	if !regexp.MustCompile(regexp.QuoteMeta(cip) + ` \. tcp \. 80 : goto svc-\S+-default/px-clusterip/tcp/http\b`).MatchString(table) {
		t.Errorf("no service-ips element for px-clusterip's cluster IP %s:\n%s", cip, table)
	}
	m := regexp.MustCompile(regexp.QuoteMeta(spread) + ` \. tcp \. 80 : goto (svc-\S+-default/px-spread/tcp/http)\b`).FindStringSubmatch(table)
	if m == nil {
		t.Fatalf("no service-ips element for px-spread %s", spread)
	}
	chain, err := h.Exec("node1", "nft", "list", "chain", "ip", "herald", m[1])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("[node1]$ nft list chain ip herald %s\n%s", m[1], chain)
	// Three endpoints: one rule draws a slot of the chain's block in
	// an endpoints map, whose three elements are the endpoints.
	pick := regexp.MustCompile(`dnat (ip )?to numgen random mod 3 (offset (\d+) )?map @(endpoints-tcp-\d+)`).FindStringSubmatch(chain)
	if pick == nil {
		t.Fatalf("%s does not pick among 3 endpoints through an endpoints map", m[1])
	}
	epm, err := h.Exec("node1", "nft", "list", "map", "ip", "herald", pick[4])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("[node1]$ nft list map ip herald %s\n%s", pick[4], epm)
	off, _ := strconv.Atoi(pick[3])
	for slot := off; slot < off+3; slot++ {
		if !regexp.MustCompile(`\b` + strconv.Itoa(slot) + ` : \S+ \. 8080\b`).MatchString(epm) {
			t.Errorf("%s has no endpoint in slot %d", pick[4], slot)
		}
	}
	hp, err := h.Exec("node1", "nft", "list", "chain", "ip", "herald", "masquerading")
	if err != nil || !strings.Contains(hp, "ip saddr . ip daddr @hairpin-endpoints") {
		t.Errorf("masquerading has no hairpin rule: %v\n%s", err, hp)
	}
	// The iptables mode's rules are gone.
	if out, _ := h.Exec("node1", "iptables-save", "-t", "nat"); strings.Contains(out, "HERALD") {
		t.Errorf("the iptables mode's chains are still there:\n%s", out)
	}
}

// checkIPTablesListing checks the iptables mode's rules as iptables -L
// lists them.
func (pc *proxyChecks) checkIPTablesListing(t *testing.T) {
	if pc.nftMode {
		t.Skip("the nftables mode")
	}
	h := harness.Start(t)
	list := func(chain string) string {
		out, err := h.Exec("node1", "iptables", "-t", "nat", "-L", chain, "-n")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// Debian 12's iptables-nft prints the protocol column as a number
	// (6, 0) where older builds print tcp, all: both are accepted.
	services := list("HERALD-SERVICES")
	t.Logf("[node1]$ iptables -t nat -L HERALD-SERVICES -n\n%s", services)
	cip, spread := clusterIP(h, "px-clusterip"), clusterIP(h, "px-spread")
	if !regexp.MustCompile(`(?m)^HERALD-SVC-\S+\s+(tcp|6)\s+--\s+0\.0\.0\.0/0\s+` + regexp.QuoteMeta(cip) + `\s+/\* default/px-clusterip:http cluster IP \*/ tcp dpt:80\s*$`).MatchString(services) {
		t.Errorf("no dispatch rule for px-clusterip's cluster IP %s", cip)
	}
	lines := strings.Split(strings.TrimSpace(services), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "HERALD-NODEPORTS") || !strings.Contains(last, "ADDRTYPE match dst-type LOCAL") {
		t.Errorf("the last rule is not the NodePort catch-all: %s", last)
	}
	m := regexp.MustCompile(`(?m)^(HERALD-SVC-\S+)\s.*` + regexp.QuoteMeta(spread) + `\s`).FindStringSubmatch(services)
	if m == nil {
		t.Fatalf("no dispatch rule for px-spread %s", spread)
	}
	svc := list(m[1])
	t.Logf("[node1]$ iptables -t nat -L %s -n\n%s", m[1], svc)
	for _, want := range []string{"statistic mode random probability 0.33333333349", "statistic mode random probability 0.50000000000", "/* default/px-spread:http cluster IP */"} {
		if !strings.Contains(svc, want) {
			t.Errorf("%s has no %q", m[1], want)
		}
	}
	sep := regexp.MustCompile(`(?m)^(HERALD-SEP-\S+)\s+(?:all|0)\s+--\s+0\.0\.0\.0/0\s+0\.0\.0\.0/0\s+/\* default/px-spread:http -> (\S+) \*/`).FindAllStringSubmatch(svc, -1)
	if len(sep) != 3 {
		t.Fatalf("%d endpoint rules, want 3", len(sep))
	}
	ep := list(sep[0][1])
	t.Logf("[node1]$ iptables -t nat -L %s -n\n%s", sep[0][1], ep)
	host, _, _ := net.SplitHostPort(sep[0][2])
	if !strings.Contains(ep, "DNAT") || !strings.Contains(ep, "to:"+sep[0][2]) || !regexp.MustCompile(`HERALD-MARK-MASQ\s+(all|0)\s+--\s+`+regexp.QuoteMeta(host)+`\s`).MatchString(ep) {
		t.Errorf("endpoint chain %s lacks the hairpin mark or the DNAT to %s", sep[0][1], sep[0][2])
	}
	nodePorts := list("HERALD-NODEPORTS")
	t.Logf("[node1]$ iptables -t nat -L HERALD-NODEPORTS -n\n%s", nodePorts)
	if !regexp.MustCompile(`(?m)^HERALD-EXT-\S+\s+(tcp|6)\s+.*/\* default/px-nodeport:http \*/ tcp dpt:` + strconv.Itoa(nodePort(h, "px-nodeport")) + `\s*$`).MatchString(nodePorts) {
		t.Error("no NodePort rule for px-nodeport")
	}
}

// checkNodePortAddresses checks that --nodeport-addresses limits NodePorts
// to the LAN address; it restarts the speakers with the flag and back.
func (pc *proxyChecks) checkNodePortAddresses(t *testing.T) {
	h := harness.Start(t)
	node := h.Node("node1")
	port := strconv.Itoa(nodePort(h, "px-nodeport"))
	lan := "http://" + net.JoinHostPort(node.IPv4.String(), port) + "/"
	gw := net.JoinHostPort(node.PodGateway.String(), port)
	pod := podNetns(h, "px-client-1") // on node1: its gateway is node1's pod bridge address
	// Unrestricted, the pod bridge's address serves the NodePort too,
	// so its refusal below is the flag's doing.
	waitPage(h, pod, "http://"+gw+"/")
	cidr := topology.LANv4.String()
	l2{h}.speakerArgs([]string{"--nodeport-addresses=" + cidr})
	page := waitPage(h, h.Layout.Client, lan)
	t.Logf("--nodeport-addresses=%s: GET %s from the LAN client: client_address=%s", cidr, lan, clientAddr(page))
	// Nothing listens on the NodePort itself: untouched by the rules,
	// the connection is refused by the node's stack at once.
	var err error
	h.Poll(30*time.Second, "node1's pod bridge address "+gw+" to refuse the NodePort", func() (bool, string) {
		var c net.Conn
		if c, err = dialFrom(pod, "tcp", gw, 3*time.Second); c != nil {
			c.Close()
		}
		return errors.Is(err, syscall.ECONNREFUSED), fmt.Sprint(err)
	})
	t.Logf("%s from %s: %v", gw, pod, err)
	if pc.nftMode {
		out, err := h.Exec("node1", "nft", "list", "set", "ip", "herald", "nodeport-ips")
		if err != nil || !strings.Contains(out, node.IPv4.String()) || strings.Contains(out, node.PodGateway.String()) {
			t.Errorf("nodeport-ips on node1: %v\n%s", err, out)
		}
		t.Logf("[node1]$ nft list set ip herald nodeport-ips\n%s", out)
		return
	}
	out, err := h.Exec("node1", "iptables", "-t", "nat", "-S", "HERALD-SERVICES")
	want := "-d " + node.IPv4.String() + "/32 -m comment --comment \"herald service nodeports; NOTE: this must be the last rule in this chain\" -j HERALD-NODEPORTS"
	if err != nil || !strings.Contains(out, want) || strings.Contains(out, "--dst-type LOCAL") {
		t.Errorf("node1's HERALD-SERVICES has no %q, or still the addrtype LOCAL jump: %v\n%s", want, err, out)
	}
	t.Logf("[node1]$ iptables -t nat -S HERALD-SERVICES\n%s", out)
}

// nftCounter is the packet count of the first counter in nft's listing.
func nftCounter(listing string) int {
	m := regexp.MustCompile(`counter packets (\d+)`).FindStringSubmatch(listing)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// udpEcho sends a datagram every 200ms from one socket (one conntrack
// entry) to the UDP Service, replaces the Service's pod while it does,
// and checks that the new pod answers soon after it is ready: the
// proxy must delete the entry that still DNATs to the old pod, which
// the client's steady traffic would otherwise keep alive for good.
func udpEcho(h *harness.T, from, cip string) {
	t := h.T
	// Start once the rules are there, so that the first phase does not
	// depend on the cleanup of entries made before them (which the
	// proxy also does) and the second tests the replacement alone.
	h.Poll(30*time.Second, "node1's rules for "+cip, func() (bool, string) {
		// Either mode's: the iptables dispatch rule or the nftables
		// service-ips element.
		out, err := h.Exec("node1", "iptables", "-t", "nat", "-S", "HERALD-SERVICES")
		if err == nil && strings.Contains(out, "-d "+cip+"/32") {
			return true, out
		}
		nout, nerr := h.Exec("node1", "nft", "list", "map", "ip", "herald", "service-ips")
		return nerr == nil && strings.Contains(nout, cip+" . udp . 53 "), out + nout
	})
	var conn *net.UDPConn
	err := netns.Do(from, func() (err error) {
		conn, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(cip), 53)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	type reply struct {
		at   time.Time
		host string
	}
	var mu sync.Mutex
	var replies []reply
	last := func() reply {
		mu.Lock()
		defer mu.Unlock()
		if len(replies) == 0 {
			return reply{}
		}
		return replies[len(replies)-1]
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			_, _ = conn.Write([]byte("ping")) // refused while nothing serves: keep going
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	go func() {
		defer wg.Done()
		buf := make([]byte, 512)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			n, err := conn.Read(buf)
			if err != nil {
				continue
			}
			if m := regexp.MustCompile(`hostname=(\S+)`).FindSubmatch(buf[:n]); m != nil {
				mu.Lock()
				replies = append(replies, reply{time.Now(), string(m[1])})
				mu.Unlock()
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	old := h.Pods("app=px-udp")[0]
	h.Poll(30*time.Second, "a UDP reply from "+old.Name, func() (bool, string) {
		return last().host == old.Name, fmt.Sprintf("last reply %+v", last())
	})
	// Show the entry the client's traffic keeps alive.
	out, _ := h.Exec("node1", "conntrack", "-L", "-p", "udp", "-d", cip)
	t.Logf("[node1]$ conntrack -L -p udp -d %s\n%s", cip, out)

	deleted := time.Now()
	h.Kubectl("delete", "pod", old.Name, "--wait=false")
	var fresh v1.Pod
	h.Poll(90*time.Second, "a replacement pod Ready", func() (bool, string) {
		for _, p := range h.Pods("app=px-udp") {
			if p.Name != old.Name && p.DeletionTimestamp == nil && harness.PodReady(&p) {
				fresh = p
				return true, ""
			}
		}
		return false, "waiting"
	})
	ready := time.Now()
	if fresh.Status.PodIP == old.Status.PodIP {
		t.Fatalf("the new pod got the old pod's IP %s: the test cannot tell a stale entry from a fresh one", fresh.Status.PodIP)
	}
	d := h.Poll(20*time.Second, "a UDP reply from the new pod "+fresh.Name, func() (bool, string) {
		return last().host == fresh.Name, fmt.Sprintf("last reply %+v", last())
	})
	t.Logf("TIMING UDP: old pod %s (%s) deleted; new pod %s (%s) Ready after %s; first reply from it %s later, with the client sending every 200ms from one port",
		old.Name, old.Status.PodIP, fresh.Name, fresh.Status.PodIP, ready.Sub(deleted).Round(time.Millisecond), d.Round(time.Millisecond))
	out, _ = h.Exec("node1", "conntrack", "-L", "-p", "udp", "-d", cip)
	if strings.Contains(out, "src="+old.Status.PodIP+" ") {
		t.Errorf("an entry still leads to the old pod:\n%s", out)
	}
}

func cleanupProxyObjects(h *harness.T) {
	_, _ = h.K.Run(h.Ctx, "delete", "deployment", "px-app", "px-multi", "px-udp", "--ignore-not-found")
	_, _ = h.K.Run(h.Ctx, "delete", "service", "px-clusterip", "px-nodeport", "px-local", "px-sticky", "px-spread", "px-udp", "px-empty", "px-touch", "--ignore-not-found")
	_, _ = h.K.Run(h.Ctx, "delete", "pod", "px-client-1", "px-client-2", "--ignore-not-found", "--wait=false")
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		l, err := h.CS.CoreV1().Pods("default").List(h.Ctx, metav1.ListOptions{LabelSelector: "app in (px-app,px-multi,px-udp,px-client)"})
		if err == nil && len(l.Items) == 0 {
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
	h.T.Errorf("the proxy test's pods are still there after a minute")
}

func podNetns(h *harness.T, pod string) string {
	return h.PodNetns("default", pod)
}

func clusterIP(h *harness.T, svc string) string {
	h.T.Helper()
	s, err := h.CS.CoreV1().Services("default").Get(h.Ctx, svc, metav1.GetOptions{})
	if err != nil {
		h.T.Fatal(err)
	}
	return s.Spec.ClusterIP
}

func nodePort(h *harness.T, svc string) int {
	h.T.Helper()
	s, err := h.CS.CoreV1().Services("default").Get(h.Ctx, svc, metav1.GetOptions{})
	if err != nil {
		h.T.Fatal(err)
	}
	return int(s.Spec.Ports[0].NodePort)
}

var clientRE = regexp.MustCompile(`client_address=(\S+)`)

func clientAddr(page string) string {
	if m := clientRE.FindStringSubmatch(page); m != nil {
		return m[1]
	}
	return ""
}

// waitPage GETs url from ns until it answers (the proxy applies a new
// Service within its minimum sync period).
func waitPage(h *harness.T, ns, url string) string {
	h.T.Helper()
	var page string
	h.Poll(30*time.Second, "GET "+url+" from "+ns, func() (bool, string) {
		var err error
		page, err = getFrom(ns, url)
		return err == nil && strings.Contains(page, "CLIENT VALUES:"), fmt.Sprint(err)
	})
	return page
}

// waitEcho waits until GET url from ns answers with client_address=want.
func waitEcho(h *harness.T, ns, url, want string) time.Duration {
	h.T.Helper()
	d := h.Poll(30*time.Second, "GET "+url+" from "+ns+" with client_address="+want, func() (bool, string) {
		page, err := getFrom(ns, url)
		if err != nil {
			return false, err.Error()
		}
		return clientAddr(page) == want, "client_address=" + clientAddr(page)
	})
	h.T.Logf("GET %s from %s: client_address=%s", url, ns, want)
	return d
}

// getFrom is one GET with a short connect timeout.
func getFrom(ns, url string) (string, error) {
	host := strings.TrimPrefix(url, "http://")
	host, path, _ := strings.Cut(host, "/")
	if !strings.Contains(host, ":") {
		host += ":80"
	}
	c, err := dialFrom(ns, "tcp", host, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := fmt.Fprintf(c, "GET /%s HTTP/1.0\r\nHost: %s\r\n\r\n", path, host); err != nil {
		return "", err
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String(), nil
}

func dialFrom(ns, network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := netns.Do(ns, func() (err error) {
		c, err = net.DialTimeout(network, addr, timeout)
		return err
	})
	return c, err
}

// curlCode runs curl on a node and returns the status and body.
func curlCode(h *harness.T, node, url string) (int, string) {
	out, _ := h.Exec(node, "curl", "-s", "--max-time", "2", "-w", "\n%{http_code}", url)
	i := strings.LastIndex(out, "\n")
	code, _ := strconv.Atoi(strings.TrimSpace(out[i+1:]))
	return code, strings.TrimSpace(out[:max(i, 0)])
}

// nodeOwned: an address of a node (LAN or pod bridge), which is what SNAT
// to "a cluster-internal IP of a node" gives.
func nodeOwned(l topology.Layout, a string) bool {
	ip, err := netip.ParseAddr(a)
	if err != nil {
		return false
	}
	for _, n := range l.Nodes {
		if ip == n.IPv4 || ip == n.PodGateway {
			return true
		}
	}
	return false
}

// rejectCount sums the packet counters of the REJECT rules with comment
// in `iptables -L -v -x` output.
func rejectCount(out, comment string) int {
	total := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[2] == "REJECT" && strings.Contains(line, "/* "+comment+" */") {
			n, _ := strconv.Atoi(f[0])
			total += n
		}
	}
	return total
}

// dnatTargets lists the distinct reply sources (the endpoints) of the TCP
// conntrack entries to dst on a node.
func dnatTargets(h *harness.T, node, dst string) []string {
	out, err := h.Exec(node, "conntrack", "-L", "-p", "tcp", "-d", dst)
	if err != nil {
		h.T.Fatal(err)
	}
	seen := map[string]bool{}
	var list []string
	for _, line := range strings.Split(out, "\n") {
		var srcs []string
		for _, f := range strings.Fields(line) {
			if s, ok := strings.CutPrefix(f, "src="); ok {
				srcs = append(srcs, s)
			}
		}
		if len(srcs) == 2 && !seen[srcs[1]] {
			seen[srcs[1]] = true
			list = append(list, srcs[1])
		}
	}
	return list
}
