package e2e

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
)

// Where the install manifests run the controller.
const (
	heraldNS       = cluster.HeraldNamespace
	controllerSel  = "app.kubernetes.io/name=herald,app.kubernetes.io/component=controller"
	controllerName = cluster.HeraldController
	leaseName      = "herald-controller"
)

// ctl wraps the shared lab with what the controller tests need.
type ctl struct{ *harness.T }

// ips returns the Service's status IPs, comma-separated ("" if none or
// if the Service does not exist).
func (c ctl) ips(ns, name string) string {
	s, err := c.CS.CoreV1().Services(ns).Get(c.Ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	var out []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	return strings.Join(out, ",")
}

func (c ctl) service(ns, name string) *v1.Service {
	c.T.T.Helper()
	s, err := c.CS.CoreV1().Services(ns).Get(c.Ctx, name, metav1.GetOptions{})
	if err != nil {
		c.T.T.Fatal(err)
	}
	return s
}

// waitIPs waits until the Service shows exactly want ("" for none).
func (c ctl) waitIPs(ns, name, want string) time.Duration {
	c.T.T.Helper()
	return c.Poll(30*time.Second, fmt.Sprintf("%s/%s to show IPs %q", ns, name, want), func() (bool, string) {
		got := c.ips(ns, name)
		return got == want, "it shows " + strconv.Quote(got)
	})
}

// waitAnyIP waits until the Service has an IP and returns its IPs.
func (c ctl) waitAnyIP(ns, name string) string {
	c.T.T.Helper()
	var got string
	c.Poll(30*time.Second, fmt.Sprintf("%s/%s to get an IP", ns, name), func() (bool, string) {
		got = c.ips(ns, name)
		return got != "", "none yet"
	})
	return got
}

// events returns "Reason: message" of the events on a Service.
func (c ctl) events(ns, name string) []string {
	c.T.T.Helper()
	l, err := c.CS.CoreV1().Events(ns).List(c.Ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		c.T.T.Fatal(err)
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].CreationTimestamp.Before(&l.Items[j].CreationTimestamp) })
	var out []string
	for _, e := range l.Items {
		if e.InvolvedObject.Kind == "Service" {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return out
}

// waitEvent waits for an event on the Service whose "Reason: message"
// contains every part.
func (c ctl) waitEvent(ns, name string, parts ...string) string {
	c.T.T.Helper()
	var found string
	c.Poll(30*time.Second, fmt.Sprintf("an event on %s/%s with %q", ns, name, parts), func() (bool, string) {
		evs := c.events(ns, name)
	next:
		for _, e := range evs {
			for _, p := range parts {
				if !strings.Contains(e, p) {
					continue next
				}
			}
			found = e
			return true, ""
		}
		return false, fmt.Sprintf("events: %q", evs)
	})
	c.T.T.Logf("event on %s/%s: %s", ns, name, found)
	return found
}

// controllerPods returns the controller's pods that are not terminating.
func (c ctl) controllerPods() []v1.Pod {
	c.T.T.Helper()
	l, err := c.CS.CoreV1().Pods(heraldNS).List(c.Ctx, metav1.ListOptions{LabelSelector: controllerSel})
	if err != nil {
		c.T.T.Fatal(err)
	}
	var out []v1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// readyControllers waits for n ready controller pods.
func (c ctl) readyControllers(n int) []v1.Pod {
	c.T.T.Helper()
	var pods []v1.Pod
	c.Poll(90*time.Second, fmt.Sprintf("%d ready controller pods", n), func() (bool, string) {
		pods = c.controllerPods()
		ready := 0
		var states []string
		for i := range pods {
			if harness.PodReady(&pods[i]) {
				ready++
			}
			states = append(states, fmt.Sprintf("%s ready=%v", pods[i].Name, harness.PodReady(&pods[i])))
		}
		return ready == n && len(pods) == n, strings.Join(states, "; ")
	})
	return pods
}

func (c ctl) lease() *coordinationv1.Lease {
	c.T.T.Helper()
	l, err := c.CS.CoordinationV1().Leases(heraldNS).Get(c.Ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		c.T.T.Fatal(err)
	}
	return l
}

func (c ctl) leaseHolder() string {
	c.T.T.Helper()
	if h := c.lease().Spec.HolderIdentity; h != nil {
		return *h
	}
	return ""
}

// containerID returns the controller container's ID (a new one after a
// restart).
func containerID(p *v1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "controller" {
			return cs.ContainerID
		}
	}
	return ""
}

// signalController sends sig to the controller process of the pod, found
// from its container's status, after checking that the PID is that
// program.
func (c ctl) signalController(pod *v1.Pod, sig syscall.Signal) {
	c.T.T.Helper()
	pid, err := c.T.ContainerPID(pod, "controller")
	if err != nil {
		c.T.T.Fatal(err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "herald\x00controller") {
		c.T.T.Fatalf("pod %s: pid %d is not herald controller (cmdline %q, %v)", pod.Name, pid, cmdline, err)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		c.T.T.Fatalf("kill -%d %d: %v", sig, pid, err)
	}
	c.T.T.Logf("sent %v to pid %d of pod %s", sig, pid, pod.Name)
}

// waitRestarted waits until the pod's controller runs again in a new
// container (a new ID) and is ready; it returns the pod.
func (c ctl) waitRestarted(name, oldID string, timeout time.Duration) *v1.Pod {
	c.T.T.Helper()
	var pod *v1.Pod
	c.Poll(timeout, "pod "+name+" to run a new, ready controller", func() (bool, string) {
		p, err := c.CS.CoreV1().Pods(heraldNS).Get(c.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		id := containerID(p)
		return id != "" && id != oldID && harness.PodReady(p), fmt.Sprintf("container %s ready=%v", id, harness.PodReady(p))
	})
	return pod
}

// metric scrapes one value of the pod's /metrics from the pod's node.
func (c ctl) metric(pod *v1.Pod, name string) (float64, error) {
	node, ok := c.Layout.Node(pod.Spec.NodeName)
	if !ok {
		return 0, fmt.Errorf("no lab node %q", pod.Spec.NodeName)
	}
	page, err := harness.HTTPGetFrom(node.Netns, fmt.Sprintf("http://%s:7472/metrics", pod.Status.PodIP))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s not in /metrics of %s", name, pod.Name)
}

// deleteNamespaces deletes namespaces and waits until they are gone.
func (c ctl) deleteNamespaces(names ...string) {
	c.T.T.Helper()
	for _, n := range names {
		err := c.CS.CoreV1().Namespaces().Delete(c.Ctx, n, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			c.T.T.Errorf("delete namespace %s: %v", n, err)
		}
	}
	c.Poll(2*time.Minute, fmt.Sprintf("namespaces %v to be gone", names), func() (bool, string) {
		var left []string
		for _, n := range names {
			if _, err := c.CS.CoreV1().Namespaces().Get(c.Ctx, n, metav1.GetOptions{}); err == nil {
				left = append(left, n)
			}
		}
		return len(left) == 0, fmt.Sprint(left)
	})
}

// svcYAML is a LoadBalancer Service; extra is appended to its spec
// (indented by four spaces).
func svcYAML(ns, name string, port int, annotations map[string]string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: %s\n", name, ns)
	if len(annotations) > 0 {
		b.WriteString("  annotations:\n")
		keys := make([]string, 0, len(annotations))
		for k := range annotations {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "    %s: %q\n", k, annotations[k])
		}
	}
	fmt.Fprintf(&b, "spec:\n  type: LoadBalancer\n  selector:\n    app: %s\n  ports:\n    - port: %d\n      protocol: TCP\n", name, port)
	for _, e := range extra {
		b.WriteString("  " + e + "\n")
	}
	return "---\n" + b.String()
}

// poolYAML is an IPAddressPool in herald's namespace; extra lines are
// appended to its spec (indented by two spaces).
func poolYAML(name string, addrs []string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "---\napiVersion: herald.io/v1beta1\nkind: IPAddressPool\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  addresses:\n", name, heraldNS)
	for _, a := range addrs {
		fmt.Fprintf(&b, "    - %s\n", a)
	}
	for _, e := range extra {
		b.WriteString("  " + e + "\n")
	}
	return b.String()
}

func nsYAML(name string, labels map[string]string) string {
	s := fmt.Sprintf("---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", name)
	if len(labels) > 0 {
		s += "  labels:\n"
		for k, v := range labels {
			s += fmt.Sprintf("    %s: %q\n", k, v)
		}
	}
	return s
}
