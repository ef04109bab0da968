package labtest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/kubelet"
	"github.com/herald-lb/herald/e2e/lab/netns"
	"github.com/herald-lb/herald/e2e/lab/proc"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// TestLabKubelets brings up a 3-node lab with lab kubelets and runs the
// Kubernetes "Using Source IP" tutorial's app on it, checking the nodes,
// pods, EndpointSlices and the pod network with real traffic.
func TestLabKubelets(t *testing.T) {
	lab := harness.Start(t)
	ctx := lab.Ctx

	checkNodes(t, lab)
	pods, byNode := runSourceIPApp(t, lab)
	checkPodNetwork(t, lab, pods, byNode)
	recorded := recordedPods(t, lab, pods)

	// Subtests get the lab with their own *testing.T.
	sub := func(name string, f func(*harness.T)) {
		t.Run(name, func(t *testing.T) {
			c := *lab
			c.T = t
			f(&c)
		})
	}
	sub("readiness-probes", testProbes)
	sub("host-network-and-herald", testHostNetworkAndHerald)
	sub("unknown-image", testUnknownImage)
	sub("kubelet-crash", testKubeletCrash)
	sub("heartbeats", testHeartbeats)
	sub("status-corrected", testStatusCorrected)
	sub("service-account-token", testServiceAccountToken)

	// --- Deleting the deployment stops the processes and removes the
	// pods' namespaces; the objects disappear.
	start := time.Now()
	lab.Kubectl("delete", "deployment", "source-ip-app")
	lab.Poll(2*time.Minute, "the deployment's pods to disappear", func() (bool, string) {
		left := lab.Pods("app=source-ip-app")
		names := []string{}
		for _, p := range left {
			names = append(names, p.Name)
		}
		return len(left) == 0, fmt.Sprint(names)
	})
	t.Logf("TIMING delete deployment to all pods gone: %s", time.Since(start).Round(time.Millisecond))
	existing, err := topology.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for ns, r := range recorded {
		if existing.Netns[ns] {
			t.Errorf("pod namespace %s survived the pod", ns)
		}
		if r.Alive() {
			t.Errorf("process %d of %s survived the pod", r.PID, ns)
		}
	}
	waitEndpoints(lab, "source-ip-app", map[string]bool{})
}

// checkNodes checks the nodes: registered, Ready, schedulable, with the
// topology's addresses, pod CIDRs and Leases, and reachable from the client.
func checkNodes(t *testing.T, lab *harness.T) {
	ctx, l := lab.Ctx, lab.Layout

	// --- Nodes: registered, Ready, schedulable, with the topology's
	// addresses and pod CIDRs.
	lab.Poll(2*time.Minute, "3 Ready, schedulable nodes", func() (bool, string) {
		nodes, err := lab.CS.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var states []string
		ok := 0
		for _, n := range nodes.Items {
			ready := false
			for _, c := range n.Status.Conditions {
				if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
					ready = true
				}
			}
			if ready && len(n.Spec.Taints) == 0 {
				ok++
			}
			states = append(states, fmt.Sprintf("%s ready=%v taints=%v", n.Name, ready, n.Spec.Taints))
		}
		return ok == 3 && len(nodes.Items) == 3, strings.Join(states, "; ")
	})
	t.Logf("TIMING lab up: %+v", lab.Lab.Timings)
	out := lab.Kubectl("get", "nodes", "-o", "wide")
	if strings.Count(out, " Ready ") != 3 {
		t.Errorf("kubectl get nodes does not show 3 Ready nodes:\n%s", out)
	}
	for _, n := range l.Nodes {
		node, err := lab.CS.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Dual-stack, IPv4 first: the proxy picks its families from these.
		var internal []string
		for _, a := range node.Status.Addresses {
			if a.Type == v1.NodeInternalIP {
				internal = append(internal, a.Address)
			}
		}
		wantIPs, wantCIDRs := []string{n.IPv4.String(), n.IPv6.String()}, []string{n.PodCIDR.String(), n.PodCIDRv6.String()}
		if !slices.Equal(internal, wantIPs) || node.Spec.PodCIDR != n.PodCIDR.String() || !slices.Equal(node.Spec.PodCIDRs, wantCIDRs) ||
			node.Labels["kubernetes.io/hostname"] != n.Name || node.Labels["kubernetes.io/os"] != "linux" {
			t.Errorf("node %s: InternalIPs %v podCIDRs %v labels %v; want %v, %v", n.Name, internal, node.Spec.PodCIDRs, node.Labels, wantIPs, wantCIDRs)
		}
		if _, err := lab.CS.CoordinationV1().Leases(kubelet.NodeLeaseNamespace).Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("node %s has no Lease: %v", n.Name, err)
		}
	}
	// The client on the LAN reaches every node's InternalIP.
	for _, n := range l.Nodes {
		var ln net.Listener
		if err := netns.Do(n.Netns, func() (err error) {
			ln, err = net.Listen("tcp", net.JoinHostPort(n.IPv4.String(), "9000"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := ln.Accept()
			if err == nil {
				fmt.Fprint(c, n.Name)
				c.Close()
			}
		}()
		var got []byte
		err := netns.Do(l.Client, func() error {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(n.IPv4.String(), "9000"), 5*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			got, err = io.ReadAll(c)
			return err
		})
		ln.Close()
		if err != nil || string(got) != n.Name {
			t.Errorf("client -> %s (%s): %q %v", n.Name, n.IPv4, got, err)
		}
	}
}

// runSourceIPApp runs the tutorial's app, one replica then three spread
// over the nodes, checking the pods' addresses, the kubelet's events and
// the EndpointSlices; it returns the pods, and them by node.
func runSourceIPApp(t *testing.T, lab *harness.T) ([]v1.Pod, map[string][]v1.Pod) {
	ctx := lab.Ctx

	// --- The tutorial's app: a Running pod with an address of its
	// node's pod CIDR, and an EndpointSlice listing it as ready.
	start := time.Now()
	lab.Kubectl("create", "deployment", "source-ip-app", "--image=registry.k8s.io/echoserver:1.4")
	pods, _ := lab.ReadyPods("app=source-ip-app", 1, 2*time.Minute)
	t.Logf("TIMING kubectl create deployment to a Running, Ready pod: %s", time.Since(start).Round(time.Millisecond))
	first := pods[0]
	ip := netip.MustParseAddr(first.Status.PodIP)
	if !lab.Node(first.Spec.NodeName).PodCIDR.Contains(ip) {
		t.Errorf("pod %s on %s has IP %s outside the node's pod CIDR", first.Name, first.Spec.NodeName, ip)
	}
	if first.Status.HostIP != lab.Node(first.Spec.NodeName).IPv4.String() {
		t.Errorf("pod hostIP %s", first.Status.HostIP)
	}
	if ips := first.Status.PodIPs; len(ips) != 2 || ips[0].IP != ip.String() || !lab.Node(first.Spec.NodeName).PodCIDRv6.Contains(netip.MustParseAddr(ips[1].IP)) {
		t.Errorf("pod IPs %v: want IPv4 first, then one of %s", ips, lab.Node(first.Spec.NodeName).PodCIDRv6)
	}
	lab.Kubectl("get", "pods", "-o", "wide")
	// The kubelet reports what it did as events, as `kubectl describe`
	// shows them.
	lab.Poll(30*time.Second, "a Started event from the kubelet", func() (bool, string) {
		evs, err := lab.CS.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + first.Name})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Reason == "Started" && e.Source.Component == "kubelet" && e.Source.Host == first.Spec.NodeName {
				return true, ""
			}
			seen = append(seen, e.Source.Component+"/"+e.Reason)
		}
		return false, fmt.Sprint(seen)
	})
	lab.Kubectl("expose", "deployment", "source-ip-app", "--port=8080")
	waitEndpoints(lab, "source-ip-app", map[string]bool{first.Status.PodIP: true})

	// --- Three replicas, spread over the nodes.
	start = time.Now()
	lab.Kubectl("scale", "deployment", "source-ip-app", "--replicas=3")
	pods, _ = lab.ReadyPods("app=source-ip-app", 3, 2*time.Minute)
	t.Logf("TIMING scale to 3 replicas to all Ready: %s", time.Since(start).Round(time.Millisecond))
	lab.Kubectl("get", "pods", "-o", "wide")
	byNode := map[string][]v1.Pod{}
	want := map[string]bool{}
	for _, p := range pods {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		want[p.Status.PodIP] = true
	}
	if len(byNode) < 2 {
		t.Fatalf("3 replicas all on one node: %v", byNode)
	}
	waitEndpoints(lab, "source-ip-app", want)
	return pods, byNode
}

// checkPodNetwork checks the pod network across nodes, and the machine
// reaching a pod's IPv6 address.
func checkPodNetwork(t *testing.T, lab *harness.T, pods []v1.Pod, byNode map[string][]v1.Pod) {
	l := lab.Layout

	// --- The pod network across nodes: from every node to a pod on
	// another node, the echo shows the node's address; from a pod, the
	// pod's.
	otherPod := func(node string) v1.Pod {
		for n, ps := range byNode {
			if n != node {
				return ps[0]
			}
		}
		t.Fatalf("no pod off %s", node)
		return v1.Pod{}
	}
	for _, n := range l.Nodes {
		target := otherPod(n.Name)
		lab.ExpectEcho(n.Netns, "http://"+net.JoinHostPort(target.Status.PodIP, "8080")+"/", n.IPv4.String())
	}
	for _, src := range pods {
		target := otherPod(src.Spec.NodeName)
		srcNetns := kubelet.PodNetnsName(lab.Layout.Prefix, src.Namespace, src.Name)
		lab.ExpectEcho(srcNetns, "http://"+net.JoinHostPort(target.Status.PodIP, "8080")+"/from-pod", src.Status.PodIP)
		// And over IPv6, between the pods' second addresses.
		lab.ExpectEcho(srcNetns, "http://"+net.JoinHostPort(podIPv6(t, target), "8080")+"/from-pod-v6", podIPv6(t, src))
	}
	// The machine reaches a pod's IPv6 address through its node, as the
	// API server reaches herald's controller over IPv4.
	hostURL := "http://" + net.JoinHostPort(podIPv6(t, pods[0]), "8080") + "/from-host"
	if page, err := hostGet(hostURL); err != nil || harness.ClientAddress(page) != topology.HostLANv6.String() {
		t.Errorf("GET %s from the machine: client_address=%q (%v), want %s", hostURL, harness.ClientAddress(page), err, topology.HostLANv6)
	}
}

// recordedPods is the kubelets' records of the pods' processes, by
// namespace; each pod must have a live one.
func recordedPods(t *testing.T, lab *harness.T, pods []v1.Pod) map[string]proc.Record {
	// The kubelets record those namespaces and processes.
	recorded := map[string]proc.Record{}
	for _, kl := range lab.Lab.Kubelets {
		s, err := kubelet.ReadState(kl.Config.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range s.Pods {
			if r, ok := p.Processes["echoserver"]; ok && strings.HasPrefix(p.Name, "source-ip-app-") {
				recorded[p.Netns] = r
			}
		}
	}
	for _, p := range pods {
		ns := kubelet.PodNetnsName(lab.Layout.Prefix, p.Namespace, p.Name)
		if r, ok := recorded[ns]; !ok || !r.Alive() {
			t.Errorf("pod %s: no live process recorded for netns %s (%+v)", p.Name, ns, recorded)
		}
	}
	return recorded
}

// waitEndpoints waits until the EndpointSlices of service list exactly
// the addresses in want, all ready, made by the endpointslice
// controller.
func waitEndpoints(lab *harness.T, service string, want map[string]bool) {
	lab.T.Helper()
	d := lab.Poll(90*time.Second, "EndpointSlices of "+service, func() (bool, string) {
		l, err := lab.CS.DiscoveryV1().EndpointSlices("default").List(lab.Ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
		if err != nil {
			return false, err.Error()
		}
		got := map[string]bool{}
		var desc []string
		for _, s := range l.Items {
			if s.Labels[discoveryv1.LabelManagedBy] != "endpointslice-controller.k8s.io" {
				return false, "slice " + s.Name + " not managed by the endpointslice controller"
			}
			for _, e := range s.Endpoints {
				ready := e.Conditions.Ready != nil && *e.Conditions.Ready
				for _, a := range e.Addresses {
					got[a] = ready
					desc = append(desc, fmt.Sprintf("%s ready=%v node=%v", a, ready, strPtr(e.NodeName)))
				}
			}
		}
		if len(got) != len(want) {
			return false, strings.Join(desc, ", ")
		}
		for a := range want {
			if !got[a] {
				return false, strings.Join(desc, ", ")
			}
		}
		return true, ""
	})
	lab.T.Logf("EndpointSlices of %s list %d ready addresses (after %s)", service, len(want), d.Round(time.Millisecond))
}

func strPtr(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// testProbes: an httpGet readiness probe that passes makes the pod Ready;
// a tcpSocket probe on a closed port keeps it Running but not Ready, and
// the EndpointSlice says so.
func testProbes(lab *harness.T) {
	lab.Apply(`
apiVersion: v1
kind: Pod
metadata: {name: probe-ok, labels: {app: probe}}
spec:
  containers:
  - name: echo
    image: registry.k8s.io/echoserver:1.4
    ports: [{name: http, containerPort: 8080}]
    readinessProbe:
      httpGet: {path: /healthz, port: http}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {name: probe-bad, labels: {app: probe}}
spec:
  containers:
  - name: echo
    image: k8s.gcr.io/echoserver:1.4
    readinessProbe:
      tcpSocket: {port: 9999}
      periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {name: probe}
spec:
  selector: {app: probe}
  ports: [{port: 8080}]
`)
	lab.Poll(time.Minute, "probe-ok Ready and probe-bad Running", func() (bool, string) {
		ok, bad := lab.Pod("probe-ok"), lab.Pod("probe-bad")
		return harness.PodReady(ok) && bad.Status.Phase == v1.PodRunning,
			fmt.Sprintf("probe-ok %s ready=%v, probe-bad %s", ok.Status.Phase, harness.PodReady(ok), bad.Status.Phase)
	})
	time.Sleep(3 * time.Second) // several failed probes
	bad := lab.Pod("probe-bad")
	if harness.PodReady(bad) || len(bad.Status.ContainerStatuses) != 1 || bad.Status.ContainerStatuses[0].Ready {
		lab.T.Errorf("probe-bad is ready although its probe fails: %+v", bad.Status)
	}
	okIP, badIP := lab.Pod("probe-ok").Status.PodIP, bad.Status.PodIP
	lab.Poll(time.Minute, "probe EndpointSlice: probe-ok ready, probe-bad not", func() (bool, string) {
		l, err := lab.CS.DiscoveryV1().EndpointSlices("default").List(lab.Ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=probe"})
		if err != nil {
			return false, err.Error()
		}
		got := map[string]bool{}
		for _, s := range l.Items {
			for _, e := range s.Endpoints {
				for _, a := range e.Addresses {
					got[a] = e.Conditions.Ready != nil && *e.Conditions.Ready
				}
			}
		}
		r1, ok1 := got[okIP]
		r2, ok2 := got[badIP]
		return ok1 && ok2 && r1 && !r2, fmt.Sprint(got)
	})
	lab.Kubectl("delete", "service", "probe")
	lab.DeletePods("probe-ok", "probe-bad")
}

// testHostNetworkAndHerald: a hostNetwork echoserver answers on its
// node's address (the client's own address shows); herald's image runs
// bin/herald with its args, downward-API env and restartPolicy.
func testHostNetworkAndHerald(lab *harness.T) {
	l := lab.Layout
	node := l.Nodes[len(l.Nodes)-1]
	lab.Apply(fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: host-echo}
spec:
  hostNetwork: true
  nodeSelector: {kubernetes.io/hostname: %[1]s}
  containers:
  - name: echo
    image: registry.k8s.io/echoserver:1.4
---
apiVersion: v1
kind: Pod
metadata: {name: herald-version}
spec:
  hostNetwork: true
  restartPolicy: Never
  nodeSelector: {kubernetes.io/hostname: %[1]s}
  containers:
  - name: herald
    image: %[2]s
    args: [version]
---
apiVersion: v1
kind: Pod
metadata: {name: herald-crash}
spec:
  restartPolicy: OnFailure
  containers:
  - name: herald
    image: herald:dev
    command: [herald, validate]
    args: [-f, /nonexistent/$(NODE_NAME)/$(POD_IP)/$(HOST_IP)/$(POD_NAME).yaml]
    env:
    - {name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
    - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
    - {name: HOST_IP, valueFrom: {fieldRef: {fieldPath: status.hostIP}}}
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
---
apiVersion: v1
kind: Pod
metadata: {name: herald-fail}
spec:
  restartPolicy: Never
  containers:
  - name: herald
    image: %[2]s
    args: [validate, -f, /nonexistent.yaml]
`, node.Name, kubelet.HeraldImageName))

	lab.Poll(time.Minute, "host-echo Ready", func() (bool, string) {
		p := lab.Pod("host-echo")
		return harness.PodReady(p), string(p.Status.Phase)
	})
	if p := lab.Pod("host-echo"); p.Status.PodIP != node.IPv4.String() || fmt.Sprint(p.Status.PodIPs) != fmt.Sprintf("[{%s} {%s}]", node.IPv4, node.IPv6) {
		lab.T.Errorf("hostNetwork pod IPs %v, want the node's %s and %s", p.Status.PodIPs, node.IPv4, node.IPv6)
	}
	lab.ExpectEcho(l.Client, "http://"+net.JoinHostPort(node.IPv4.String(), "8080")+"/", topology.ClientV4.String())

	lab.Poll(time.Minute, "herald-version Succeeded", func() (bool, string) {
		p := lab.Pod("herald-version")
		return p.Status.Phase == v1.PodSucceeded, fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	if cs := lab.Pod("herald-version").Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil ||
		cs[0].State.Terminated.ExitCode != 0 || cs[0].State.Terminated.Reason != "Completed" {
		lab.T.Errorf("herald-version container: %+v", cs)
	}
	lab.Poll(time.Minute, "herald-fail Failed", func() (bool, string) {
		p := lab.Pod("herald-fail")
		return p.Status.Phase == v1.PodFailed, fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	if cs := lab.Pod("herald-fail").Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil ||
		cs[0].State.Terminated.ExitCode == 0 || cs[0].RestartCount != 0 {
		lab.T.Errorf("herald-fail container: %+v", cs)
	}
	var crash *v1.Pod
	lab.Poll(time.Minute, "herald-crash restarted", func() (bool, string) {
		crash = lab.Pod("herald-crash")
		cs := crash.Status.ContainerStatuses
		return crash.Status.Phase == v1.PodRunning && len(cs) == 1 && cs[0].RestartCount >= 2 &&
				cs[0].LastTerminationState.Terminated != nil && cs[0].LastTerminationState.Terminated.ExitCode != 0,
			fmt.Sprintf("%s %+v", crash.Status.Phase, cs)
	})
	// The container's log shows the arguments with the downward API's
	// values filled in.
	want := fmt.Sprintf("/nonexistent/%s/%s/%s/herald-crash.yaml", crash.Spec.NodeName, crash.Status.PodIP, lab.Node(crash.Spec.NodeName).IPv4)
	kl := lab.Lab.Kubelets[0]
	for _, k := range lab.Lab.Kubelets {
		if k.Config.NodeName == crash.Spec.NodeName {
			kl = k
		}
	}
	logPath := filepath.Join(kl.Config.StateDir, kubelet.PodsDir, fmt.Sprintf("default_herald-crash_%s", crash.UID), "herald.log")
	data, err := os.ReadFile(logPath)
	if err != nil || !strings.Contains(string(data), want) {
		lab.T.Errorf("herald-crash log %s lacks %q (%v):\n%s", logPath, want, err, data)
	}
	lab.DeletePods("host-echo", "herald-version", "herald-crash", "herald-fail")
}

// testUnknownImage: an image the lab cannot run leaves the container
// Waiting with a clear reason, the pod Pending, the kubelet alive; the pod
// can still be deleted.
func testUnknownImage(lab *harness.T) {
	lab.Kubectl("run", "unknown-image", "--image=nginx:1.27", "--restart=Never")
	lab.Poll(time.Minute, "unknown-image Waiting in ErrImagePull", func() (bool, string) {
		p := lab.Pod("unknown-image")
		cs := p.Status.ContainerStatuses
		return p.Status.Phase == v1.PodPending && len(cs) == 1 && cs[0].State.Waiting != nil &&
				cs[0].State.Waiting.Reason == "ErrImagePull" && strings.Contains(cs[0].State.Waiting.Message, `"nginx:1.27"`),
			fmt.Sprintf("%s %+v", p.Status.Phase, cs)
	})
	lab.Kubectl("get", "pod", "unknown-image", "-o", "jsonpath={.status.containerStatuses[0].state.waiting}")
	for _, kl := range lab.Lab.Kubelets {
		if kl.Process.Exited() {
			lab.T.Errorf("kubelet %s exited: %v", kl.Config.NodeName, kl.Process.Err())
		}
	}
	lab.DeletePods("unknown-image")
}

// testKubeletCrash: a SIGKILLed kubelet takes its containers with it (they
// die with their parent), kubelet.Down removes the namespaces it left, and
// a new kubelet with the same state directory runs the node's pods again.
func testKubeletCrash(lab *harness.T) {
	kl := lab.Lab.Kubelets[0]
	lab.Apply(fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: crash-victim}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  containers:
  - name: echo
    image: registry.k8s.io/echoserver:1.4
`, kl.Config.NodeName))
	lab.Poll(time.Minute, "crash-victim Ready", func() (bool, string) {
		p := lab.Pod("crash-victim")
		return harness.PodReady(p), string(p.Status.Phase)
	})
	s, err := kubelet.ReadState(kl.Config.StateDir)
	if err != nil {
		lab.T.Fatal(err)
	}
	var rec kubelet.PodRecord
	for _, p := range s.Pods {
		if p.Name == "crash-victim" {
			rec = p
		}
	}
	container, ok := rec.Processes["echo"]
	if !ok || rec.Netns == "" {
		lab.T.Fatalf("no record of crash-victim in %+v", s)
	}

	if err := syscall.Kill(kl.Process.PID, syscall.SIGKILL); err != nil {
		lab.T.Fatal(err)
	}
	<-kl.Process.Done()
	lab.Poll(10*time.Second, "the container to die with its kubelet", func() (bool, string) {
		return !container.Alive(), fmt.Sprintf("pid %d alive", container.PID)
	})
	existing, _ := topology.Observe(lab.Ctx)
	if !existing.Netns[rec.Netns] {
		lab.T.Errorf("expected %s to be left behind by the killed kubelet", rec.Netns)
	}
	if err := kubelet.Down(kl.Config.StateDir, kubelet.DownOptions{KeepLogs: true, Log: lab.T.Output()}); err != nil {
		lab.T.Fatal(err)
	}
	existing, _ = topology.Observe(lab.Ctx)
	if existing.Netns[rec.Netns] {
		lab.T.Errorf("down left %s", rec.Netns)
	}

	// A new kubelet picks the node's pods up again.
	if err := lab.Lab.StartKubelet(kl); err != nil {
		lab.T.Fatal(err)
	}
	var p *v1.Pod
	lab.Poll(time.Minute, "crash-victim running again under the new kubelet", func() (bool, string) {
		p = lab.Pod("crash-victim")
		cs := p.Status.ContainerStatuses
		return harness.PodReady(p) && len(cs) == 1 && cs[0].ContainerID != "" && cs[0].ContainerID != containerIDBefore(rec),
			fmt.Sprintf("%s ready=%v %+v", p.Status.Phase, harness.PodReady(p), cs)
	})
	// From its own node a pod is reached over the pod bridge, from the
	// node's address there.
	lab.ExpectEcho(kl.Config.NodeNetns, "http://"+net.JoinHostPort(p.Status.PodIP, "8080")+"/", kl.Config.PodGateway.String())
	lab.DeletePods("crash-victim")
}

// containerIDBefore is the container ID the kubelet reported for the
// recorded process.
func containerIDBefore(rec kubelet.PodRecord) string {
	return fmt.Sprintf("lab://%s/%d", rec.Netns, rec.Processes["echo"].PID)
}

// testHeartbeats: every node's Lease is renewed and its Ready condition's
// heartbeat refreshed (every 10s).
func testHeartbeats(lab *harness.T) {
	first := map[string]time.Time{}
	for _, n := range lab.Layout.Nodes {
		l, err := lab.CS.CoordinationV1().Leases(kubelet.NodeLeaseNamespace).Get(lab.Ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			lab.T.Fatal(err)
		}
		first[n.Name] = l.Spec.RenewTime.Time
	}
	lab.Poll(30*time.Second, "renewed Leases and node heartbeats", func() (bool, string) {
		var stale []string
		for _, n := range lab.Layout.Nodes {
			l, err := lab.CS.CoordinationV1().Leases(kubelet.NodeLeaseNamespace).Get(lab.Ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			node, err := lab.CS.CoreV1().Nodes().Get(lab.Ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var hb time.Time
			for _, c := range node.Status.Conditions {
				if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
					hb = c.LastHeartbeatTime.Time
				}
			}
			if !l.Spec.RenewTime.Time.After(first[n.Name]) || hb.Before(first[n.Name].Truncate(time.Second)) {
				stale = append(stale, fmt.Sprintf("%s lease %s heartbeat %s", n.Name, l.Spec.RenewTime.Time, hb))
			}
		}
		return len(stale) == 0, strings.Join(stale, "; ")
	})
}

// testStatusCorrected: when something else writes a pod's status (the
// node lifecycle controller marks every pod of a node it thinks
// NotReady not ready), the kubelet writes back what it knows, as a real
// kubelet's status manager does, so the pod is ready again in seconds.
func testStatusCorrected(lab *harness.T) {
	pods := lab.Pods("app=source-ip-app")
	if len(pods) == 0 {
		lab.T.Fatal("no source-ip-app pod")
	}
	pod := pods[0].DeepCopy()
	found := false
	for i, c := range pod.Status.Conditions {
		if c.Type == v1.PodReady {
			if c.Status != v1.ConditionTrue {
				lab.T.Fatalf("pod %s is not ready to begin with: %+v", pod.Name, c)
			}
			pod.Status.Conditions[i].Status = v1.ConditionFalse
			pod.Status.Conditions[i].LastTransitionTime = metav1.Now()
			found = true
		}
	}
	if !found {
		lab.T.Fatalf("pod %s has no Ready condition", pod.Name)
	}
	if _, err := lab.CS.CoreV1().Pods(pod.Namespace).UpdateStatus(lab.Ctx, pod, metav1.UpdateOptions{}); err != nil {
		lab.T.Fatal(err)
	}
	start := time.Now()
	lab.Poll(20*time.Second, "the kubelet to write pod "+pod.Name+" ready again", func() (bool, string) {
		p, err := lab.CS.CoreV1().Pods(pod.Namespace).Get(lab.Ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady {
				return c.Status == v1.ConditionTrue, fmt.Sprintf("Ready=%s", c.Status)
			}
		}
		return false, "no Ready condition"
	})
	lab.T.Logf("TIMING pod marked not ready by another writer to ready again: %s", time.Since(start).Round(time.Millisecond))
}

// testServiceAccountToken: a pod finds its API credentials where every
// in-cluster client looks (token bound to the pod, the cluster's CA, its
// namespace), mounted read-only in its own mount namespace only, and the
// API server accepts the token as the pod's service account.
func testServiceAccountToken(lab *harness.T) {
	lab.Kubectl("create", "serviceaccount", "sa-check")
	lab.Apply(`
apiVersion: v1
kind: Pod
metadata: {name: sa-check}
spec:
  serviceAccountName: sa-check
  containers:
  - name: echo
    image: registry.k8s.io/echoserver:1.4
`)
	var p *v1.Pod
	lab.Poll(time.Minute, "sa-check Ready", func() (bool, string) {
		p = lab.Pod("sa-check")
		return harness.PodReady(p), string(p.Status.Phase)
	})
	cid := p.Status.ContainerStatuses[0].ContainerID
	pid := cid[strings.LastIndexByte(cid, '/')+1:]
	// /var/run is a symlink to /run, which would resolve against this
	// process's root, not the container's: read through the real path.
	real, err := filepath.EvalSymlinks(filepath.Dir(filepath.Dir(filepath.Dir(kubelet.ServiceAccountDir))))
	if err != nil {
		lab.T.Fatal(err)
	}
	dir := filepath.Join("/proc", pid, "root", real, "secrets/kubernetes.io/serviceaccount")
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			lab.T.Fatalf("the container cannot see its %s: %v", name, err)
		}
		return string(data)
	}
	if ns := read("namespace"); ns != "default" {
		lab.T.Errorf("namespace file %q, want default", ns)
	}
	if ca := read("ca.crt"); ca != string(lab.Lab.ControlPlane.CACertPEM()) {
		lab.T.Errorf("ca.crt is not the cluster's CA:\n%s", ca)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("x"), 0o644); err == nil {
		lab.T.Errorf("the service-account volume is writable from the container")
	}
	if _, err := os.Stat(filepath.Join(kubelet.ServiceAccountDir, "token")); err == nil {
		lab.T.Errorf("the token is visible on the machine's own %s, outside the container", kubelet.ServiceAccountDir)
	}
	tr, err := lab.CS.AuthenticationV1().TokenReviews().Create(lab.Ctx, &authv1.TokenReview{Spec: authv1.TokenReviewSpec{Token: read("token")}}, metav1.CreateOptions{})
	if err != nil {
		lab.T.Fatal(err)
	}
	st := tr.Status
	if !st.Authenticated || st.User.Username != "system:serviceaccount:default:sa-check" ||
		fmt.Sprint(st.User.Extra["authentication.kubernetes.io/pod-name"]) != "[sa-check]" ||
		fmt.Sprint(st.User.Extra["authentication.kubernetes.io/node-name"]) != "["+p.Spec.NodeName+"]" {
		lab.T.Errorf("token review: %+v", st)
	} else {
		lab.T.Logf("the pod's token authenticates as %s, bound to pod %s on %s", st.User.Username, p.Name, p.Spec.NodeName)
	}
	lab.DeletePods("sa-check")
	lab.Kubectl("delete", "serviceaccount", "sa-check")
}

// podIPv6 is a pod's IPv6 address (its second podIP on the dual-stack lab).
func podIPv6(t *testing.T, p v1.Pod) string {
	t.Helper()
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is6() {
			return ip.IP
		}
	}
	t.Fatalf("pod %s has no IPv6 address: %v", p.Name, p.Status.PodIPs)
	return ""
}

// hostGet GETs url from the machine itself, never through a proxy.
func hostGet(url string) (string, error) {
	c := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
