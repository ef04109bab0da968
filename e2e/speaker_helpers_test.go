package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/labbin"
)

// Where the install manifests run the speakers.
const (
	speakerSel = "app.kubernetes.io/name=herald,app.kubernetes.io/component=speaker"
	speakerDS  = cluster.HeraldSpeaker
)

// l2 wraps the shared lab with what the speaker tests need.
type l2 struct{ *harness.T }

// speakers maps node name to its speaker pod.
func (s l2) speakers() map[string]v1.Pod {
	s.T.T.Helper()
	l, err := s.CS.CoreV1().Pods(heraldNS).List(s.Ctx, metav1.ListOptions{LabelSelector: speakerSel})
	if err != nil {
		s.T.T.Fatal(err)
	}
	out := map[string]v1.Pod{}
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out[p.Spec.NodeName] = p
		}
	}
	return out
}

// readySpeakers waits until every node runs a ready speaker.
func (s l2) readySpeakers(timeout time.Duration) map[string]v1.Pod {
	s.T.T.Helper()
	var pods map[string]v1.Pod
	s.Poll(timeout, "a ready speaker on every node", func() (bool, string) {
		pods = s.speakers()
		var states []string
		ready := 0
		for n, p := range pods {
			if harness.PodReady(&p) {
				ready++
			}
			states = append(states, fmt.Sprintf("%s: %s ready=%v", n, p.Status.Phase, harness.PodReady(&p)))
		}
		return ready == len(s.Layout.Nodes) && len(pods) == len(s.Layout.Nodes), strings.Join(states, "; ")
	})
	// A speaker an earlier test got counted out (isolated, or declared
	// dead under load) is recovering for --recovery-hold and takes its
	// addresses back when the hold ends: wait for the end, so that a
	// test's own addresses do not move under it for that reason.
	s.Poll(timeout, "no speaker recovering or isolated", func() (bool, string) {
		var states []string
		ok := true
		for _, n := range s.Layout.Nodes {
			rec, err1 := s.speakerMetric(n.Name, "herald_speaker_recovering")
			iso, err2 := s.speakerMetric(n.Name, "herald_speaker_isolated")
			states = append(states, fmt.Sprintf("%s: recovering=%v isolated=%v (%v %v)", n.Name, rec, iso, err1, err2))
			ok = ok && err1 == nil && err2 == nil && rec == 0 && iso == 0
		}
		return ok, strings.Join(states, "; ")
	})
	return pods
}

// speakerPID is the speaker process of a pod, from its container's
// status (harness.T.ContainerPID), checked against /proc.
func (s l2) speakerPID(p v1.Pod) int {
	s.T.T.Helper()
	pid, err := s.T.ContainerPID(&p, "speaker")
	if err != nil {
		s.T.T.Fatal(err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "herald\x00speaker") {
		s.T.T.Fatalf("pod %s: pid %d is not herald speaker (cmdline %q, %v)", p.Name, pid, cmdline, err)
	}
	return pid
}

// killSpeaker sends SIGKILL to the speaker of node and returns the pod
// it ran in.
func (s l2) killSpeaker(node string) v1.Pod {
	s.T.T.Helper()
	p, ok := s.speakers()[node]
	if !ok {
		s.T.T.Fatalf("no speaker on %s", node)
	}
	pid := s.speakerPID(p)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		s.T.T.Fatalf("kill -9 %d: %v", pid, err)
	}
	return p
}

// announcements returns the ServiceAnnouncements of a Service that carry IPs as
// "node:iface,iface:ip,ip" strings, sorted.
func (s l2) announcements(ns, svc string) []string {
	s.T.T.Helper()
	out, err := s.K.Output(s.Ctx, "-n", heraldNS, "get", "serviceannouncements", "-l",
		"herald.io/service-namespace="+ns+",herald.io/service-name="+svc, "-o",
		`jsonpath={range .items[*]}{.status.node}:{.status.protocol}:{.status.interfaces}:{.status.ips}{"\n"}{end}`)
	if err != nil {
		s.T.T.Fatal(err)
	}
	// An object without IPs only reports why addresses are not
	// announced (status.unannounced): not an announcement.
	lines := slices.DeleteFunc(strings.Fields(out), func(l string) bool { return strings.HasSuffix(l, ":") })
	slices.Sort(lines)
	return lines
}

// announcersOf reads once which nodes' ServiceAnnouncements of the
// Service carry ip.
func (s l2) announcersOf(ns, svc, ip string) (nodes, all []string) {
	all = s.announcements(ns, svc)
	for _, a := range all {
		if strings.Contains(a, `"`+ip+`"`) {
			nodes = append(nodes, strings.SplitN(a, ":", 2)[0])
		}
	}
	return nodes, all
}

// announcer waits until exactly one node announces the Service's ip and
// returns it.
func (s l2) announcer(ns, svc, ip string, timeout time.Duration) string {
	s.T.T.Helper()
	var node string
	s.Poll(timeout, fmt.Sprintf("one ServiceAnnouncement of %s/%s with %s", ns, svc, ip), func() (bool, string) {
		who, anns := s.announcersOf(ns, svc, ip)
		if len(who) == 1 {
			node = who[0]
		}
		return len(who) == 1, fmt.Sprint(anns)
	})
	return node
}

// mac returns the MAC of iface in a lab target (node or client).
func (s l2) mac(target, iface string) string {
	s.T.T.Helper()
	out, err := s.Exec(target, "ip", "-j", "link", "show", iface)
	if err != nil {
		s.T.T.Fatal(err)
	}
	var links []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		s.T.T.Fatalf("ip -j link show %s in %s: %q (%v)", iface, target, out, err)
	}
	return strings.ToLower(links[0].Address)
}

// macOwners maps each node's eth0 MAC to the node.
func (s l2) macOwners() map[string]string {
	out := map[string]string{}
	for _, n := range s.Layout.Nodes {
		out[s.mac(n.Name, "eth0")] = n.Name
	}
	return out
}

var arpingMAC = regexp.MustCompile(`(?i)\b([0-9a-f]{2}(?::[0-9a-f]{2}){5})\b`)

// arping sends count ARP requests for ip from the client and returns the
// distinct MACs that answered, sorted, and the raw output.
func (s l2) arping(ip string, count, waitSec int) ([]string, string) {
	out, _ := s.Exec("client", "arping", "-i", "eth0", "-c", strconv.Itoa(count), "-w", strconv.Itoa(waitSec), "-r", ip)
	set := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if m := arpingMAC.FindString(strings.TrimSpace(line)); m != "" {
			set[strings.ToLower(m)] = true
		}
	}
	var macs []string
	for m := range set {
		macs = append(macs, m)
	}
	slices.Sort(macs)
	return macs, out
}

// neighMAC is the client kernel's neighbor entry for ip ("" if none).
func (s l2) neighMAC(ip string) (mac, state string) {
	return harness.Neighbor(s.Layout.Client, ip)
}

// curlClient GETs url from the client netns.
func (s l2) curlClient(url string) (string, error) {
	return harness.HTTPGetFrom(s.Layout.Client, url)
}

// speakerMetric reads one sample of a node's speaker /metrics ("" name
// prefix match on the whole series, labels included).
func (s l2) speakerMetric(node, series string) (float64, error) {
	n, ok := s.Layout.Node(node)
	if !ok {
		return 0, fmt.Errorf("no lab node %q", node)
	}
	page, err := harness.HTTPGetFrom(n.Netns, "http://127.0.0.1:7473/metrics")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s not in the speaker metrics of %s", series, node)
}

// heraldStatus runs `herald status` with the lab's kubeconfig.
func (s l2) heraldStatus(args ...string) (string, error) {
	bin := s.Lab.Bins.Path(labbin.Herald)
	return runOut(bin, append([]string{"status", "--kubeconfig", s.Lab.Kubeconfig}, args...)...)
}

// routes is a node's routing table, one `ip route` line each, for
// putting back what `ip link set eth0 down` removes.
func (s l2) routes(node string) (v4, v6 []string) {
	s.T.T.Helper()
	for _, fam := range []string{"-4", "-6"} {
		out, err := s.Exec(node, "ip", fam, "route", "show", "table", "main")
		if err != nil {
			s.T.T.Fatal(err)
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, l)
			}
		}
		if fam == "-4" {
			v4 = lines
		} else {
			v6 = lines
		}
	}
	return v4, v6
}

// restoreLink brings eth0 of node up and puts back the routes the link
// took with it (the kernel restores only the prefix routes of its
// addresses).
func (s l2) restoreLink(node string, v4, v6 []string) error {
	if _, err := s.Exec(node, "ip", "link", "set", "eth0", "up"); err != nil {
		return err
	}
	now4, now6 := s.routes(node)
	var errs []string
	for fam, lines := range map[string][]string{"-4": v4, "-6": v6} {
		have := now4
		if fam == "-6" {
			have = now6
		}
		for _, l := range lines {
			if slices.Contains(have, l) {
				continue
			}
			// `ip route` prints state flags that it does not take back.
			args := []string{"ip", fam, "route", "replace"}
			for _, f := range strings.Fields(l) {
				if !slices.Contains([]string{"linkdown", "dead", "offload", "trap", "rt_offload", "rt_trap"}, f) {
					args = append(args, f)
				}
			}
			if _, err := s.Exec(node, args...); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("restoring routes of %s: %s", node, strings.Join(errs, "; "))
	}
	return nil
}

// l2Objects are the speaker tests' pool and advertisement (in herald's
// namespace) over part of the lab's L2 range that the other tests do not
// use, and an echo server pinned to a node.
func l2Objects(name, v4, v6, node string) string {
	return fmt.Sprintf(`apiVersion: herald.io/v1beta1
kind: IPAddressPool
metadata: {name: %[1]s, namespace: %[5]s}
spec:
  addresses: [%[2]s, %[3]s]
---
apiVersion: herald.io/v1beta1
kind: L2Advertisement
metadata: {name: %[1]s, namespace: %[5]s}
spec:
  ipAddressPools: [%[1]s]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      nodeSelector: {kubernetes.io/hostname: %[4]s}
      containers: [{name: echo, image: registry.k8s.io/echoserver:1.4}]
`, name, v4, v6, node, heraldNS)
}

// runOut runs a program on the machine and returns its combined output.
func runOut(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// on binds the helpers to a subtest, so a failure ends that subtest.
func (s l2) on(t *testing.T) (l2, *harness.T) {
	c := *s.T
	c.T = t
	return l2{&c}, &c
}

// nodeNames are the lab's nodes, in order.
func (s l2) nodeNames() []string {
	var out []string
	for _, n := range s.Layout.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// cleanupL2Services removes, after the test, the Services name-0 ...
// name-(count-1), the Deployment and the pool and L2Advertisement that
// l2Objects made for name.
func (s l2) cleanupL2Services(name string, count int) {
	h := s.T
	h.T.Cleanup(func() {
		for i := range count {
			_, _ = h.K.Run(h.Ctx, "delete", "service", fmt.Sprintf("%s-%d", name, i), "--ignore-not-found")
		}
		_, _ = h.K.Run(h.Ctx, "delete", "deployment", name, "--ignore-not-found")
		_, _ = h.K.Run(h.Ctx, "-n", heraldNS, "delete", "l2advertisement,ipaddresspool", name, "--ignore-not-found")
	})
}
