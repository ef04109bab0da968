package labtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/e2eimages"
)

// upstreamImagesPods are the pods of TestUpstreamImages: agnhost as
// upstream's Service tests run it (a netexec server, a client idling on
// the image's default "pause"), on two nodes, and the pause image.
const upstreamImagesPods = `
apiVersion: v1
kind: Pod
metadata:
  name: e2eimg-server
  labels: {app: e2eimg-server}
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 2
  containers:
  - name: agnhost
    image: %[3]s
    args: ["netexec", "--http-port=8080", "--udp-port=8081"]
---
apiVersion: v1
kind: Pod
metadata:
  name: e2eimg-client
  labels: {app: e2eimg-client}
spec:
  nodeName: %[2]s
  terminationGracePeriodSeconds: 2
  containers:
  - name: agnhost
    image: %[3]s
---
apiVersion: v1
kind: Pod
metadata:
  name: e2eimg-pause
  labels: {app: e2eimg-pause}
spec:
  nodeName: %[2]s
  terminationGracePeriodSeconds: 30
  containers:
  - name: pause
    image: %[4]s
`

// upstreamStandInPods run the other stand-ins as the sig-network tests
// do: busybox with the commands of Conntrack's init container and client
// (as a regular container here; TestInitContainers covers init containers), nginx
// (EndpointSlice), distroless-iptables with sleep (KubeProxy), the
// boom-server of regression-issue-74839 with NET_RAW (Conntrack) and
// jessie-dnsutils as the DNS tests' prober.
const upstreamStandInPods = `
apiVersion: v1
kind: Pod
metadata:
  name: e2eimg-busybox
  labels: {app: e2eimg-busybox}
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 2
  containers:
  - name: busybox
    image: %[2]s
    command: ["/bin/sh", "-c", "echo Pausing start. && exec sleep 3600"]
---
apiVersion: v1
kind: Pod
metadata:
  name: e2eimg-nginx
  labels: {app: e2eimg-nginx}
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 2
  containers:
  - name: nginx
    image: %[3]s
---
apiVersion: v1
kind: Pod
metadata:
  name: e2eimg-iptables
  labels: {app: e2eimg-iptables}
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 2
  containers:
  - name: iptables
    image: %[4]s
    command: ["sleep", "600"]
---
apiVersion: v1
kind: Pod
metadata:
  name: e2eimg-boom
  labels: {app: e2eimg-boom}
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 2
  containers:
  - name: boom-server
    image: %[5]s
    env:
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    - name: POD_IPS
      valueFrom: {fieldRef: {fieldPath: status.podIPs}}
    securityContext:
      capabilities: {add: [NET_RAW]}
---
apiVersion: v1
kind: Pod
metadata:
  name: e2eimg-dnsutils
  labels: {app: e2eimg-dnsutils}
spec:
  nodeName: %[1]s
  terminationGracePeriodSeconds: 2
  containers:
  - name: jessie-querier
    image: %[6]s
    command: ["sh", "-c", "exec sleep 600"]
`

// TestUpstreamImages runs the images e2e/lab/e2eimages makes for
// Kubernetes' upstream e2e suite (the references its pinned framework
// uses) in the lab's image mode: from an agnhost pod on another node,
// the commands the upstream Service tests exec (/agnhost connect, nc,
// curl, wget) reach an agnhost netexec pod over TCP and UDP; a pause pod
// runs and ends at once on SIGTERM; the other stand-ins start and do
// what their tests ask of them.
func TestUpstreamImages(t *testing.T) {
	if os.Getenv(cluster.ImageModeEnv) != "1" {
		t.Skipf("image mode only (%s=1, as make e2e-image-test sets it): binary mode runs host programs, not these images", cluster.ImageModeEnv)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the images go into root's podman storage, and the lab builds network namespaces")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	res, err := e2eimages.Ensure(ctx, e2eimages.Options{Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	ref := func(name string) string {
		im, ok := res.Image(name)
		if !ok {
			t.Fatalf("e2eimages made no %s image", name)
		}
		return im.Ref
	}

	lab := harness.Start(t)
	if len(lab.Lab.Kubelets) < 2 {
		t.Fatalf("the lab has %d nodes, want 2", len(lab.Lab.Kubelets))
	}
	serverNode, clientNode := lab.Lab.Kubelets[0].Config.NodeName, lab.Lab.Kubelets[1].Config.NodeName
	t.Cleanup(func() { deletePodsIfPresent(lab, "e2eimg-server", "e2eimg-client", "e2eimg-pause") })
	lab.Apply(fmt.Sprintf(upstreamImagesPods, serverNode, clientNode, ref(e2eimages.Agnhost), ref(e2eimages.Pause)))
	server, _ := lab.ReadyPods("app=e2eimg-server", 1, 3*time.Minute)
	lab.ReadyPods("app=e2eimg-client", 1, 3*time.Minute)
	ip := server[0].Status.PodIP
	t.Logf("agnhost netexec %s on %s (%s), the client on %s", server[0].Name, serverNode, ip, clientNode)

	// inClient runs a command in the client pod; the server may need a
	// moment before it listens, so a failure is retried for a while.
	inClient := func(t *testing.T, want func(stdout string) bool, args ...string) string {
		t.Helper()
		var stdout, stderr string
		var code int
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
			stdout, stderr, code = runKubectl(t, lab, nil, append([]string{"exec", "e2eimg-client", "--"}, args...)...)
			if code == 0 && want(stdout) {
				return stdout
			}
			if time.Now().After(deadline) {
				t.Errorf("%v: exit code %d, stdout %q, stderr %q", args, code, stdout, stderr)
				return stdout
			}
		}
	}
	is := func(s string) func(string) bool { return func(out string) bool { return strings.TrimSpace(out) == s } }
	has := func(s string) func(string) bool { return func(out string) bool { return strings.Contains(out, s) } }
	anything := func(string) bool { return true }
	hostPort := func(port int) string { return fmt.Sprintf("%s:%d", ip, port) }

	t.Run("agnhost", func(t *testing.T) {
		// As the Service tests probe TCP and UDP (framework/service's
		// jig and network's connect helpers).
		inClient(t, anything, "/agnhost", "connect", "--timeout=3s", hostPort(8080))
		inClient(t, anything, "/agnhost", "connect", "--protocol=udp", "--timeout=3s", hostPort(8081))
		inClient(t, is(server[0].Name), "curl", "-g", "-q", "-s", "--connect-timeout", "3", "http://"+hostPort(8080)+"/hostname")
		inClient(t, has(server[0].Name), "/bin/sh", "-c", fmt.Sprintf("echo hostName | nc -v -u -w 2 %s 8081", ip))
		inClient(t, func(out string) bool { return strings.TrimSpace(out) != "" }, "/bin/sh", "-c", fmt.Sprintf("echo hostName | nc -v -t -w 2 %s 8080", ip))
		inClient(t, is(server[0].Name), "/bin/sh", "-c", fmt.Sprintf("wget -q -O - -T 1 http://%s/hostname", hostPort(8080)))
		// A closed port is reported as upstream's tests expect.
		_, stderr, code := runKubectl(t, lab, nil, "exec", "e2eimg-client", "--", "/agnhost", "connect", "--timeout=3s", hostPort(9))
		if code == 0 || !strings.Contains(stderr, "REFUSED") {
			t.Errorf("connect to a closed port: exit code %d, stderr %q (want REFUSED)", code, stderr)
		}
		// The DNS tests' own DNS server.
		inClient(t, has("CoreDNS-"), "/coredns", "-version")
		// The image's user and group, for the SupplementalGroups tests.
		inClient(t, is("uid=1000(user-defined-in-image) gid=1000(user-defined-in-image) groups=1000(user-defined-in-image),50000(group-defined-in-image)"),
			"id", "user-defined-in-image")
	})

	t.Run("pause", func(t *testing.T) {
		p, _ := lab.ReadyPods("app=e2eimg-pause", 1, 3*time.Minute)
		cs := p[0].Status.ContainerStatuses
		if len(cs) != 1 || cs[0].State.Running == nil || cs[0].RestartCount != 0 {
			t.Fatalf("pause container: %+v", cs)
		}
		// pause ends on SIGTERM: the pod goes long before its 30 s grace
		// period would end in a SIGKILL.
		start := time.Now()
		lab.DeletePods("e2eimg-pause")
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("deleting the pause pod took %s: pause did not end on SIGTERM", d.Round(time.Millisecond))
		} else {
			t.Logf("the pause pod was gone %s after its deletion", d.Round(time.Millisecond))
		}
	})

	t.Run("stand-ins", func(t *testing.T) {
		names := []string{"e2eimg-busybox", "e2eimg-nginx", "e2eimg-iptables", "e2eimg-boom", "e2eimg-dnsutils"}
		t.Cleanup(func() { deletePodsIfPresent(lab, names...) })
		lab.Apply(fmt.Sprintf(upstreamStandInPods, serverNode, ref(e2eimages.BusyBox), ref(e2eimages.Nginx),
			ref(e2eimages.DistrolessIptables), ref(e2eimages.RegressionIssue74839), ref(e2eimages.JessieDnsutils)))
		for _, n := range names {
			lab.ReadyPods("app="+n, 1, 3*time.Minute)
		}
		nginx := lab.Pod("e2eimg-nginx")
		inClient(t, has("Welcome to nginx"), "curl", "-g", "-q", "-s", "--connect-timeout", "3", "http://"+nginx.Status.PodIP+":80/")
		if t.Failed() {
			// Once in CI (and never since) this timed out for 30 s while
			// the other pods of the node answered: record the path.
			dumpPodPath(t, lab.Lab.Kubelets[0].Config.NodeNetns, nginx.Status.PodIP, "80")
		}
		// busybox's nc as the Conntrack test's client uses it (TCP), here
		// against netexec's HTTP port, which answers the line with a 400.
		if out, _, code := runKubectl(t, lab, nil, "exec", "e2eimg-busybox", "-c", "busybox", "--", "sh", "-c",
			fmt.Sprintf("echo hostName | nc -w 2 %s 8080", ip)); code != 0 || !strings.Contains(out, "400 Bad Request") {
			t.Errorf("busybox nc to netexec: exit code %d, %q", code, out)
		}
		if out, _ := lab.K.Run(lab.Ctx, "logs", "e2eimg-busybox"); !strings.Contains(out, "Pausing start.") {
			t.Errorf("busybox's log: %q", out)
		}
		if out, _, code := runKubectl(t, lab, nil, "exec", "e2eimg-iptables", "--", "/bin/sh", "-c", "which conntrack && iptables --version"); code != 0 || !strings.Contains(out, "iptables v") {
			t.Errorf("distroless-iptables stand-in: exit code %d, %q", code, out)
		}
		// The prober's tools (the lab's cluster DNS is not asked here).
		if out, _, code := runKubectl(t, lab, nil, "exec", "e2eimg-dnsutils", "--", "sh", "-c", "dig -v 2>&1 && getent hosts localhost"); code != 0 || !strings.Contains(out, "DiG 9.") {
			t.Errorf("jessie-dnsutils stand-in: exit code %d, %q", code, out)
		}
		lab.Poll(time.Minute, "the boom-server to listen", func() (bool, string) {
			out, err := lab.K.Run(lab.Ctx, "logs", "e2eimg-boom")
			return err == nil && strings.Contains(out, "listen on"), out
		})
		checkNoRestarts(t, lab, "app in (e2eimg-busybox, e2eimg-nginx, e2eimg-iptables, e2eimg-boom, e2eimg-dnsutils)")
	})
	checkNoRestarts(t, lab, "app in (e2eimg-server, e2eimg-client)")
}

// deletePodsIfPresent deletes those of the pods of the default namespace
// that are still there and waits until they are gone.
func deletePodsIfPresent(lab *harness.T, names ...string) {
	lab.T.Helper()
	lab.Kubectl(append([]string{"delete", "pod", "--ignore-not-found", "--wait=false"}, names...)...)
	lab.Poll(time.Minute, fmt.Sprintf("pods %v to disappear", names), func() (bool, string) {
		l, err := lab.CS.CoreV1().Pods("default").List(lab.Ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var left []string
		for _, p := range l.Items {
			if slices.Contains(names, p.Name) {
				left = append(left, p.Name)
			}
		}
		return len(left) == 0, fmt.Sprint(left)
	})
}

// checkNoRestarts fails the test when a selected pod's container
// restarted (a stand-in that crashes would still be Running now and
// then).
func checkNoRestarts(t *testing.T, lab *harness.T, selector string) {
	t.Helper()
	l, err := lab.CS.CoreV1().Pods("default").List(lab.Ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Items {
		for _, c := range p.Status.ContainerStatuses {
			if c.RestartCount != 0 || p.Status.Phase != v1.PodRunning {
				t.Errorf("pod %s: container %s restarted %d times, phase %s", p.Name, c.Name, c.RestartCount, p.Status.Phase)
			}
		}
	}
}

// dumpPodPath logs what the node's namespace knows of the way to a pod
// address (neighbour entry, bridge ports and forwarding table, conntrack
// entries) and whether the node itself reaches the port, for a test that
// found the pod unreachable.
func dumpPodPath(t *testing.T, nodeNetns, podIP, port string) {
	t.Helper()
	for _, argv := range [][]string{
		{"ip", "-n", nodeNetns, "neigh", "show", podIP},
		{"ip", "-n", nodeNetns, "route", "get", podIP},
		{"bridge", "-n", nodeNetns, "link", "show"},
		{"bridge", "-n", nodeNetns, "fdb", "show", "br", "cbr0"},
		{"ip", "netns", "exec", nodeNetns, "conntrack", "-L", "-d", podIP},
		{"ip", "netns", "exec", nodeNetns, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--connect-timeout", "3", "http://" + podIP + ":" + port + "/"},
	} {
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		t.Logf("$ %s (err %v)\n%s", strings.Join(argv, " "), err, out)
	}
}
