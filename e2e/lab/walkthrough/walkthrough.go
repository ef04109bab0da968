// Package walkthrough runs the Kubernetes "Using Source IP" tutorial in
// the lab with the tutorial's own commands (kubectl, curl from a pod, from
// the LAN client and from the nodes) and judges each step against the
// outcome the tutorial documents.
//
// A step whose prerequisite herald component is not installed is reported
// as NOT YET naming the missing component, never as passed; a step whose
// prerequisites are there but whose outcome differs is a FAIL. So the same
// walkthrough is the newcomer's tour (`make lab`) and the acceptance test.
package walkthrough

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/herald-lb/herald/e2e/lab/kubectl"
	"github.com/herald-lb/herald/e2e/lab/kubelet"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// Verdict is a step's result.
type Verdict string

// Verdicts.
const (
	Pass   Verdict = "PASS"
	Fail   Verdict = "FAIL"
	NotYet Verdict = "NOT YET"
)

// Result is one step's outcome.
type Result struct {
	Step    string
	Verdict Verdict
	// Detail says what was seen, or what is missing.
	Detail string
}

// Env is the lab the walkthrough runs in.
type Env struct {
	Layout  topology.Layout
	Kubectl *kubectl.Kubectl
	// Out receives the commands, their output and the verdicts.
	Out io.Writer
	// Timeout bounds each wait (pods Ready, an external IP); default 60s.
	Timeout time.Duration
	// ProxyMode is the mode /proxyMode must answer; default iptables.
	ProxyMode string
	// RealNodes: the nodes run the real kubelet and containerd, so the
	// client pod is the tutorial's busybox and is reached with kubectl
	// exec (the lab kubelet's pods are network namespaces the walkthrough
	// curls from directly).
	RealNodes bool
	// BusyBox is the busybox image real nodes have (the upstream suite's).
	BusyBox string
}

// Components the tutorial's steps rely on; Detect finds which are there.
type Components struct {
	Proxy      bool // kube-proxy's role: a proxy answers on some node's :10249
	Controller bool // external IPs for LoadBalancer Services
	Speaker    bool // external IPs reachable from the LAN
	// Silent names the nodes whose proxy does not answer /proxyMode
	// while another node's does: an installed proxy that is down there,
	// which fails the proxy step rather than making it NOT YET.
	Silent []string
}

// Detect looks for herald's components: a proxy answering on the nodes'
// :10249, the controller Deployment, the speaker DaemonSet.
func (e *Env) Detect(ctx context.Context) Components {
	var c Components
	for _, n := range e.Layout.Nodes {
		if out, err := curl(ctx, n.Netns, "http://127.0.0.1:10249/proxyMode", 2); err != nil || strings.TrimSpace(out) == "" {
			c.Silent = append(c.Silent, n.Name)
		} else {
			c.Proxy = true
		}
	}
	if !c.Proxy {
		c.Silent = nil // no proxy at all: the proxy steps are NOT YET
	}
	if _, err := e.Kubectl.Output(ctx, "-n", "herald-system", "get", "deployment", "herald-controller"); err == nil {
		c.Controller = true
	}
	if _, err := e.Kubectl.Output(ctx, "-n", "herald-system", "get", "daemonset", "herald-speaker"); err == nil {
		c.Speaker = true
	}
	return c
}

type run struct {
	*Env
	ctx     context.Context
	have    Components
	results []Result
	podIP   string
	podNode string
	client  string // the in-cluster client pod's IP
	// createdPool: the walkthrough made the lab-lan pool and removes it.
	createdPool bool
}

// Run walks through the tutorial and returns every step's result. It
// removes what it created at the end, and what an earlier run left at
// the start.
func Run(ctx context.Context, env Env) []Result {
	if env.Timeout == 0 {
		env.Timeout = 60 * time.Second
	}
	r := &run{Env: &env, ctx: ctx}
	r.have = env.Detect(ctx)
	r.say("herald components: proxy=%v controller=%v speaker=%v\n", r.have.Proxy, r.have.Controller, r.have.Speaker)
	if len(r.have.Silent) > 0 {
		r.say("no answer on :10249 from %s\n", strings.Join(r.have.Silent, ", "))
	}
	r.cleanup(false)
	steps := []struct {
		name string
		fn   func() Result
	}{
		{"app", r.app},
		{"proxy mode", r.proxyMode},
		{"ClusterIP", r.clusterIP},
		{"NodePort, Cluster", r.nodePortCluster},
		{"NodePort, Local", r.nodePortLocal},
		{"LoadBalancer, Cluster", r.loadBalancerCluster},
		{"LoadBalancer, Local", r.loadBalancerLocal},
	}
	appOK := true
	for _, s := range steps {
		r.say("\n=== %s\n", s.name)
		var res Result
		if !appOK {
			res = Result{Verdict: Fail, Detail: "the app is not running"}
		} else {
			res = s.fn()
		}
		res.Step = s.name
		if s.name == "app" && res.Verdict != Pass {
			appOK = false
		}
		r.say("--- %s: %s: %s\n", res.Verdict, s.name, res.Detail)
		r.results = append(r.results, res)
	}
	r.say("\n=== cleanup\n")
	res := r.cleanup(true)
	r.say("--- %s: cleanup: %s\n", res.Verdict, res.Detail)
	r.results = append(r.results, res)
	return r.results
}

// Summary counts the verdicts.
func Summary(results []Result) (pass, fail, notYet int) {
	for _, r := range results {
		switch r.Verdict {
		case Pass:
			pass++
		case Fail:
			fail++
		case NotYet:
			notYet++
		}
	}
	return
}

func (r *run) say(format string, args ...any) {
	if r.Out != nil {
		fmt.Fprintf(r.Out, format, args...)
	}
}

// kubectl runs and shows a kubectl command.
func (r *run) kubectl(args ...string) (string, error) {
	r.say("$ kubectl %s\n", strings.Join(args, " "))
	out, err := r.Kubectl.Run(r.ctx, args...)
	r.say("%s", indent(out))
	return out, err
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ") + "\n"
}

// curl runs curl inside a namespace and returns the body.
func curl(ctx context.Context, ns, url string, timeoutSec int) (string, error) {
	t := strconv.Itoa(timeoutSec)
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "curl", "-s", "--connect-timeout", t, "--max-time", t, url).Output()
	return string(out), err
}

// curlShown is curl with the command and the client_address line shown.
func (r *run) curlShown(where, ns, url string) (string, error) {
	r.say("[%s]$ curl -s --connect-timeout 1 %s | grep client_address\n", where, url)
	out, err := curl(r.ctx, ns, url, 1)
	if err != nil {
		r.say("    (no answer: %v)\n", err)
		return "", err
	}
	r.say("%s", indent(clientLine(out)))
	return out, nil
}

var clientRE = regexp.MustCompile(`client_address=(\S+)`)

func clientLine(page string) string {
	if m := clientRE.FindString(page); m != "" {
		return m
	}
	return strings.TrimSpace(page)
}

func clientAddress(page string) string {
	if m := clientRE.FindStringSubmatch(page); m != nil {
		return m[1]
	}
	return ""
}

// wait polls fn until it returns a non-empty string or the timeout ends.
func (r *run) wait(fn func() string) string {
	deadline := time.Now().Add(r.Timeout)
	for {
		if v := fn(); v != "" {
			return v
		}
		if time.Now().After(deadline) || r.ctx.Err() != nil {
			return ""
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// settle retries check without showing anything until it holds or the
// timeout passes: a proxy applies a new Service within its minimum sync
// period (1s, as kube-proxy's), while the walkthrough types faster than
// any reader. The step then runs once more for the transcript.
func (r *run) settle(check func() bool) {
	out := r.Out
	r.Out = nil
	defer func() { r.Out = out }()
	deadline := time.Now().Add(r.Timeout)
	for !check() && time.Now().Before(deadline) && r.ctx.Err() == nil {
		time.Sleep(300 * time.Millisecond)
	}
}

func (r *run) jsonpath(args ...string) string {
	out, err := r.Kubectl.Output(r.ctx, args...)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

func (r *run) app() Result {
	if _, err := r.kubectl("create", "deployment", "source-ip-app", "--image=registry.k8s.io/echoserver:1.4"); err != nil {
		return Result{Verdict: Fail, Detail: err.Error()}
	}
	// The tutorial's client pod: busybox on real nodes, reached with
	// kubectl exec; with the lab kubelet, the echo server image, whose
	// network namespace the walkthrough curls from.
	run := []string{"run", "source-ip-client", "--image=registry.k8s.io/echoserver:1.4", "--labels=app=source-ip-client"}
	if r.RealNodes {
		run = []string{"run", "source-ip-client", "--image=" + r.BusyBox, "--labels=app=source-ip-client", "--command", "--", "sleep", "3600"}
	}
	if _, err := r.kubectl(run...); err != nil {
		return Result{Verdict: Fail, Detail: err.Error()}
	}
	// "IP node" of the first Ready pod matching sel.
	ready := func(sel string) string {
		out := r.jsonpath("get", "pods", "-l", sel, "-o",
			`jsonpath={range .items[*]}{.status.podIP} {.spec.nodeName} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[2] == "True" {
				return f[0] + " " + f[1]
			}
		}
		return ""
	}
	app := strings.Fields(r.wait(func() string { return ready("app=source-ip-app") }))
	client := strings.Fields(r.wait(func() string { return ready("app=source-ip-client") }))
	if len(app) != 2 || len(client) != 2 {
		return Result{Verdict: Fail, Detail: fmt.Sprintf("pods not Ready within %s", r.Timeout)}
	}
	r.podIP, r.podNode, r.client = app[0], app[1], client[0]
	r.kubectl("get", "pods", "-o", "wide")
	// The echo server itself, reached directly from the client pod.
	page, err := r.clientGetShown("http://" + r.podIP + ":8080/")
	if err != nil || !strings.Contains(page, "CLIENT VALUES:") {
		return Result{Verdict: Fail, Detail: "the echo server does not answer on its pod IP"}
	}
	if got := clientAddress(page); got != r.client {
		return Result{Verdict: Fail, Detail: fmt.Sprintf("direct pod-to-pod client_address=%s, want the client pod's %s", got, r.client)}
	}
	return Result{Verdict: Pass, Detail: fmt.Sprintf("source-ip-app on %s at %s echoes client_address", r.podNode, r.podIP)}
}

func (r *run) podNetns(name string) string {
	return kubelet.PodNetnsName(r.Layout.Prefix, "default", name)
}

// clientGet fetches url from the client pod: with busybox's wget through
// kubectl exec on real nodes, as the tutorial does, else with curl in
// the pod's network namespace.
func (r *run) clientGet(url string, timeoutSec int) (string, error) {
	if !r.RealNodes {
		return curl(r.ctx, r.podNetns("source-ip-client"), url, timeoutSec)
	}
	return r.Kubectl.Output(r.ctx, "exec", "source-ip-client", "--", "timeout", strconv.Itoa(timeoutSec), "wget", "-qO", "-", url)
}

// clientGetShown is clientGet with the command and the client_address
// line shown.
func (r *run) clientGetShown(url string) (string, error) {
	if !r.RealNodes {
		return r.curlShown("pod source-ip-client", r.podNetns("source-ip-client"), url)
	}
	r.say("$ kubectl exec source-ip-client -- wget -qO - %s | grep client_address\n", url)
	out, err := r.clientGet(url, 2)
	if err != nil {
		r.say("    (no answer: %v)\n", err)
		return "", err
	}
	r.say("%s", indent(clientLine(out)))
	return out, nil
}

// proxyMode asks every node's proxy its mode, as the tutorial asks one
// node's: a node whose proxy is silent or in another mode fails the step.
func (r *run) proxyMode() Result {
	if !r.have.Proxy {
		return Result{Verdict: NotYet, Detail: "nothing answers on any node's :10249: no service proxy is installed"}
	}
	want := r.ProxyMode
	if want == "" {
		want = "iptables"
	}
	var wrong []string
	for _, n := range r.Layout.Nodes {
		r.say("[%s]$ curl http://localhost:10249/proxyMode\n", n.Name)
		out, err := curl(r.ctx, n.Netns, "http://127.0.0.1:10249/proxyMode", 2)
		r.say("%s", indent(out))
		if err != nil || strings.TrimSpace(out) != want {
			wrong = append(wrong, fmt.Sprintf("%s: %q (%v)", n.Name, strings.TrimSpace(out), err))
		}
	}
	if len(wrong) > 0 {
		return Result{Verdict: Fail, Detail: fmt.Sprintf("proxyMode want %s; %s", want, strings.Join(wrong, "; "))}
	}
	return Result{Verdict: Pass, Detail: fmt.Sprintf("%s on all %d nodes", want, len(r.Layout.Nodes))}
}

func (r *run) clusterIP() Result {
	if _, err := r.kubectl("expose", "deployment", "source-ip-app", "--name=clusterip", "--port=80", "--target-port=8080"); err != nil {
		return Result{Verdict: Fail, Detail: err.Error()}
	}
	ip := r.wait(func() string { return r.jsonpath("get", "svc", "clusterip", "-o", "jsonpath={.spec.clusterIP}") })
	r.kubectl("get", "svc", "clusterip")
	if r.have.Proxy {
		r.settle(func() bool {
			page, err := r.clientGet("http://"+ip+"/", 1)
			return err == nil && clientAddress(page) == r.client
		})
	}
	page, err := r.clientGetShown("http://" + ip + "/")
	if !r.have.Proxy {
		return Result{Verdict: NotYet, Detail: "ClusterIPs need a service proxy, and none is installed"}
	}
	if err != nil {
		return Result{Verdict: Fail, Detail: "no answer from the ClusterIP"}
	}
	if got := clientAddress(page); got != r.client {
		return Result{Verdict: Fail, Detail: fmt.Sprintf("client_address=%s, want the client pod's IP %s", got, r.client)}
	}
	return Result{Verdict: Pass, Detail: "client_address is the client pod's IP " + r.client}
}

// nodeOwned tells whether a is an address of some node (its LAN address or
// its pod-bridge gateway): what SNAT to "a cluster-internal IP of a node"
// produces.
func (r *run) nodeOwned(a string) bool {
	ip, err := netip.ParseAddr(a)
	if err != nil {
		return false
	}
	for _, n := range r.Layout.Nodes {
		if ip == n.IPv4 || ip == n.PodGateway {
			return true
		}
	}
	return false
}

func (r *run) nodePortLoop(port string) map[string]string {
	got := map[string]string{}
	for _, n := range r.Layout.Nodes {
		page, err := r.curlShown("client", r.Layout.Client, "http://"+n.IPv4.String()+":"+port+"/")
		if err == nil {
			got[n.Name] = clientAddress(page)
		}
	}
	return got
}

func (r *run) nodePortCluster() Result {
	if _, err := r.kubectl("expose", "deployment", "source-ip-app", "--name=nodeport", "--port=80", "--target-port=8080", "--type=NodePort"); err != nil {
		return Result{Verdict: Fail, Detail: err.Error()}
	}
	port := r.wait(func() string { return r.jsonpath("get", "svc", "nodeport", "-o", "jsonpath={.spec.ports[0].nodePort}") })
	if r.have.Proxy {
		r.settle(func() bool { return len(r.nodePortLoop(port)) == len(r.Layout.Nodes) })
	}
	got := r.nodePortLoop(port)
	if !r.have.Proxy {
		return Result{Verdict: NotYet, Detail: "NodePorts need a service proxy, and none is installed"}
	}
	if len(got) != len(r.Layout.Nodes) {
		return Result{Verdict: Fail, Detail: fmt.Sprintf("answers from %d of %d nodes: %v", len(got), len(r.Layout.Nodes), got)}
	}
	for node, a := range got {
		if !r.nodeOwned(a) {
			return Result{Verdict: Fail, Detail: fmt.Sprintf("via %s client_address=%s, want a node's IP (SNAT)", node, a)}
		}
	}
	return Result{Verdict: Pass, Detail: fmt.Sprintf("every node answers, client_address is a node IP: %v", got)}
}

func (r *run) nodePortLocal() Result {
	if _, err := r.kubectl("patch", "svc", "nodeport", "-p", `{"spec":{"externalTrafficPolicy":"Local"}}`); err != nil {
		return Result{Verdict: Fail, Detail: err.Error()}
	}
	port := r.jsonpath("get", "svc", "nodeport", "-o", "jsonpath={.spec.ports[0].nodePort}")
	want := map[string]string{r.podNode: topology.ClientV4.String()}
	if r.have.Proxy {
		r.settle(func() bool { return fmt.Sprint(r.nodePortLoop(port)) == fmt.Sprint(want) })
	}
	got := r.nodePortLoop(port)
	if !r.have.Proxy {
		return Result{Verdict: NotYet, Detail: "NodePorts need a service proxy, and none is installed"}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return Result{Verdict: Fail, Detail: fmt.Sprintf("answers %v, want only %v", got, want)}
	}
	return Result{Verdict: Pass, Detail: fmt.Sprintf("only %s answers, with the client's own IP", r.podNode)}
}

func (r *run) externalIP() string {
	return r.wait(func() string {
		return r.jsonpath("get", "svc", "loadbalancer", "-o", "jsonpath={.status.loadBalancer.ingress[0].ip}")
	})
}

func (r *run) loadBalancerCluster() Result {
	if _, err := r.kubectl("expose", "deployment", "source-ip-app", "--name=loadbalancer", "--port=80", "--target-port=8080", "--type=LoadBalancer"); err != nil {
		return Result{Verdict: Fail, Detail: err.Error()}
	}
	if !r.have.Controller {
		r.kubectl("get", "svc", "loadbalancer")
		return Result{Verdict: NotYet, Detail: "EXTERNAL-IP stays <pending>: herald's controller is not installed"}
	}
	if err := r.ensurePool(); err != nil {
		return Result{Verdict: Fail, Detail: err.Error()}
	}
	ip := r.externalIP()
	r.kubectl("get", "svc", "loadbalancer")
	if ip == "" {
		return Result{Verdict: Fail, Detail: "no EXTERNAL-IP"}
	}
	if r.have.Speaker && r.have.Proxy {
		// The winning speaker answers ARP once it has seen the IP; the
		// proxies program it within their minimum sync period.
		r.settle(func() bool {
			page, err := curl(r.ctx, r.Layout.Client, "http://"+ip+"/", 1)
			return err == nil && r.nodeOwned(clientAddress(page))
		})
	}
	page, err := r.curlShown("client", r.Layout.Client, "http://"+ip+"/")
	if !r.have.Speaker || !r.have.Proxy {
		return Result{Verdict: NotYet, Detail: fmt.Sprintf("EXTERNAL-IP %s assigned; reaching it needs herald's speaker and a service proxy, and one is not installed", ip)}
	}
	if err != nil {
		return Result{Verdict: Fail, Detail: "no answer from " + ip}
	}
	if a := clientAddress(page); !r.nodeOwned(a) {
		return Result{Verdict: Fail, Detail: fmt.Sprintf("client_address=%s, want a node IP (SNAT)", a)}
	}
	return Result{Verdict: Pass, Detail: fmt.Sprintf("EXTERNAL-IP %s answers with a node's IP as client_address", ip)}
}

// ensurePool gives the lab an L2 pool for the tutorial's LoadBalancer
// when none exists (the tutorial assumes a cloud that has one).
func (r *run) ensurePool() error {
	if out := r.jsonpath("-n", "herald-system", "get", "ipaddresspools", "-o", "name"); out != "" {
		return nil
	}
	r.say("$ kubectl apply -f - # an IPAddressPool and L2Advertisement for the lab's LAN\n")
	pool := fmt.Sprintf(`apiVersion: herald.io/v1beta1
kind: IPAddressPool
metadata: {name: lab-lan, namespace: herald-system}
spec:
  addresses: [%s]
---
apiVersion: herald.io/v1beta1
kind: L2Advertisement
metadata: {name: lab-lan, namespace: herald-system}
spec:
  ipAddressPools: [lab-lan]
`, topology.L2PoolV4)
	_, err := r.Kubectl.RunStdin(r.ctx, strings.NewReader(pool), "apply", "-f", "-")
	r.createdPool = err == nil
	return err
}

func (r *run) loadBalancerLocal() Result {
	if _, err := r.kubectl("patch", "svc", "loadbalancer", "-p", `{"spec":{"externalTrafficPolicy":"Local"}}`); err != nil {
		return Result{Verdict: Fail, Detail: err.Error()}
	}
	hcnp := r.jsonpath("get", "svc", "loadbalancer", "-o", "jsonpath={.spec.healthCheckNodePort}")
	r.say("$ kubectl get svc loadbalancer -o yaml | grep -i healthCheckNodePort\n    healthCheckNodePort: %s\n", hcnp)
	probe := func() map[string]string {
		healthy := map[string]string{}
		for _, n := range r.Layout.Nodes {
			r.say("[%s]$ curl -s -o /dev/null -w '%%{http_code}' localhost:%s/healthz\n", n.Name, hcnp)
			out, _ := exec.CommandContext(r.ctx, "ip", "netns", "exec", n.Netns, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
				"--connect-timeout", "1", "--max-time", "2", "http://127.0.0.1:"+hcnp+"/healthz").Output()
			healthy[n.Name] = string(out)
			r.say("    %s\n", out)
		}
		return healthy
	}
	wrong := func(healthy map[string]string) string {
		for name, code := range healthy {
			want := "503"
			if name == r.podNode {
				want = "200"
			}
			if code != want {
				return fmt.Sprintf("/healthz on %s answered %q, want %s", name, code, want)
			}
		}
		return ""
	}
	if r.have.Proxy {
		r.settle(func() bool { return wrong(probe()) == "" })
	}
	healthy := probe()
	if !r.have.Proxy {
		return Result{Verdict: NotYet, Detail: "healthCheckNodePort is served by the service proxy, and none is installed"}
	}
	if msg := wrong(healthy); msg != "" {
		return Result{Verdict: Fail, Detail: msg}
	}
	if !r.have.Controller || !r.have.Speaker {
		return Result{Verdict: NotYet, Detail: "healthz is right; the external IP needs herald's controller and speaker, and one is not installed"}
	}
	ip := r.externalIP()
	if ip == "" {
		return Result{Verdict: Fail, Detail: "healthz is right, but the Service got no external IP"}
	}
	// Under Local only a node with the pod may win the IP: the election
	// moves it there, and the client learns the new MAC from the
	// winner's gratuitous ARP.
	r.settle(func() bool {
		page, err := curl(r.ctx, r.Layout.Client, "http://"+ip+"/", 1)
		return err == nil && clientAddress(page) == topology.ClientV4.String()
	})
	page, err := r.curlShown("client", r.Layout.Client, "http://"+ip+"/")
	if err != nil {
		return Result{Verdict: Fail, Detail: "no answer from " + ip}
	}
	if a := clientAddress(page); a != topology.ClientV4.String() {
		return Result{Verdict: Fail, Detail: fmt.Sprintf("client_address=%s, want the client's own %s", a, topology.ClientV4)}
	}
	return Result{Verdict: Pass, Detail: "healthz only where the pod runs; the client's own IP reaches the pod"}
}

// cleanup removes the tutorial's objects; shown, it is the tutorial's
// last step and checks that the Services are gone.
func (r *run) cleanup(shown bool) Result {
	args := [][]string{
		{"delete", "svc", "clusterip", "nodeport", "loadbalancer", "--ignore-not-found"},
		{"delete", "deployment", "source-ip-app", "--ignore-not-found"},
		{"delete", "pod", "source-ip-client", "--ignore-not-found", "--wait=false"},
	}
	if r.createdPool {
		args = append(args, []string{"-n", "herald-system", "delete", "l2advertisement,ipaddresspool", "lab-lan", "--ignore-not-found"})
	}
	var errs []string
	for _, a := range args {
		var err error
		if shown {
			_, err = r.kubectl(a...)
		} else {
			_, err = r.Kubectl.Run(r.ctx, a...)
		}
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	gone := r.wait(func() string {
		if r.jsonpath("get", "pods", "-l", "app in (source-ip-app,source-ip-client)", "-o", "name") == "" {
			return "gone"
		}
		return ""
	})
	switch {
	case len(errs) > 0:
		return Result{Step: "cleanup", Verdict: Fail, Detail: strings.Join(errs, "; ")}
	case gone == "":
		return Result{Step: "cleanup", Verdict: Fail, Detail: "the tutorial's pods are still there"}
	}
	return Result{Step: "cleanup", Verdict: Pass, Detail: "Services, deployment and client pod removed"}
}
