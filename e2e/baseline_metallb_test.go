package e2e

// Like baseline_kubeproxy_test.go, this test brings up a lab of its own,
// and its file name sorts before the tests that use the shared lab.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/labbin"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// metallbCRDs are MetalLB's kinds the move reads, without schemas: the
// test needs their API, not MetalLB. BGPPeer is served at v1beta1 and
// stored at v1beta2, as MetalLB's CRD has it.
func metallbCRDs() string {
	var b strings.Builder
	for _, k := range []struct{ kind, plural string }{
		{"IPAddressPool", "ipaddresspools"}, {"L2Advertisement", "l2advertisements"},
		{"BGPAdvertisement", "bgpadvertisements"}, {"BGPPeer", "bgppeers"},
	} {
		versions := `  - {name: v1beta1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}`
		if k.kind == "BGPPeer" {
			versions = `  - {name: v1beta1, served: true, storage: false, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
  - {name: v1beta2, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}`
		}
		fmt.Fprintf(&b, `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %[2]s.metallb.io}
spec:
  group: metallb.io
  scope: Namespaced
  names: {kind: %[1]s, plural: %[2]s, singular: %[3]s, listKind: %[1]sList}
  versions:
%[4]s
`, k.kind, k.plural, strings.ToLower(k.kind), versions)
	}
	return b.String()
}

// metallbConfig is a MetalLB configuration as its users have it: a pool
// announced over layer 2, a pool announced over BGP to the lab router,
// the peer as MetalLB's ConfigMap converter writes it (v1beta2, with
// "passwordSecret: {}", which names no Secret). Next to it, what MetalLB
// never read: a pool of the same name with another range, and a
// catch-all advertisement, in namespace default. Were they translated,
// herald could announce and assign from a range MetalLB never used.
func metallbConfig() string {
	return fmt.Sprintf(`---
apiVersion: v1
kind: Namespace
metadata: {name: metallb-system}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: lan, namespace: metallb-system}
spec: {addresses: [198.51.100.210-198.51.100.219]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: lan, namespace: metallb-system}
spec: {ipAddressPools: [lan]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: routed, namespace: metallb-system}
spec: {addresses: [203.0.113.176/28], autoAssign: false}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: routed, namespace: metallb-system}
spec: {ipAddressPools: [routed]}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata:
  name: router
  namespace: metallb-system
spec:
  holdTime: 9s
  keepaliveTime: 3s
  myASN: %d
  passwordSecret: {}
  peerASN: %d
  peerAddress: %s
status: {}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: lan, namespace: default}
spec: {addresses: [198.51.100.200-198.51.100.219]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: everything, namespace: default}
`, bgpNodeASN, cluster.RouterASN, topology.RouterLANv4)
}

// metallbServices are Services as MetalLB left them: its annotations
// (the current and the older names), and each with the address MetalLB
// gave it, which the test writes into the status as MetalLB would (with
// MetalLB's pool annotation). None of them is the lowest free address of
// its pool, so an address assigned anew would show.
var metallbServices = []struct {
	name, ann, ip, pool string
	port                int
}{
	{"mig-l2", "metallb.io/address-pool: lan", "198.51.100.213", "lan", 80},
	{"mig-share-80", "metallb.universe.tf/allow-shared-ip: web", "198.51.100.215", "lan", 80},
	{"mig-share-81", "metallb.io/allow-shared-ip: web", "198.51.100.215", "lan", 81},
	{"mig-bgp", `metallb.io/loadBalancerIPs: "203.0.113.181"`, "203.0.113.181", "routed", 80},
}

// TestMigrateFromMetalLB moves a cluster from MetalLB to herald as
// docs/migrating-from-metallb.md says: MetalLB's CRDs (schema-less, for
// the test), its configuration and Services carrying the addresses MetalLB
// gave them; `herald migrate --from-cluster | kubectl apply -f -`; herald
// installed next to kube-proxy. No address changes, every address
// answers (layer 2 from the LAN client, BGP from the remote client behind
// the router), herald status shows each announced, and the Services' use
// of MetalLB's annotation names is pointed out in events.
func TestMigrateFromMetalLB(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	h := harness.UpOwnLab(t, ctx, cluster.Options{Prefix: "hmg", Nodes: 2, Bare: true, Proxy: cluster.ProxyKubeProxy})
	herald := h.Lab.Bins.Path(labbin.Herald)

	applyMetalLBState(ctx, h)
	yaml := migrateMetalLB(ctx, t, h, herald)

	// As docs/migrating-from-metallb.md: herald's namespace and
	// configuration first, then herald.
	h.Apply(fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n", cluster.HeraldNamespace))
	h.Apply(string(yaml))
	t.Logf("kubectl -n herald-system get ipaddresspools.herald.io,l2advertisements.herald.io,bgpadvertisements.herald.io,bgppeers.herald.io:\n%s",
		h.Kubectl("-n", cluster.HeraldNamespace, "get", "ipaddresspools.herald.io,l2advertisements.herald.io,bgpadvertisements.herald.io,bgppeers.herald.io"))

	start := time.Now()
	if err := h.Lab.InstallHerald(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIMING herald installed in %s", time.Since(start).Round(time.Millisecond))

	checkAdoptedAndAnswering(ctx, t, h, start)
	checkMigratedStatus(ctx, t, h, herald)
}

// applyMetalLBState makes the cluster look as MetalLB left it: its CRDs
// and configuration, an echo server, and Services with MetalLB's
// annotations and addresses.
func applyMetalLBState(ctx context.Context, h *harness.T) {
	h.Apply(metallbCRDs())
	h.Poll(30*time.Second, "MetalLB's CRDs established", func() (bool, string) {
		out, err := h.K.Run(ctx, "wait", "--for=condition=Established", "--timeout=5s",
			"crd/ipaddresspools.metallb.io", "crd/l2advertisements.metallb.io", "crd/bgpadvertisements.metallb.io", "crd/bgppeers.metallb.io")
		return err == nil, out
	})
	h.Apply(metallbConfig())
	h.Apply(echoDeploymentYAML("mig-echo", "node1", 1))
	for _, s := range metallbServices {
		h.Apply(fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: default
  annotations:
    %s
    metallb.io/ip-allocated-from-pool: %s
spec:
  type: LoadBalancer
  selector: {app: mig-echo}
  ports: [{port: %d, targetPort: 8080, protocol: TCP}]
`, s.name, s.ann, s.pool, s.port))
		h.Kubectl("patch", "service", s.name, "--subresource=status", "--type=merge",
			"-p", fmt.Sprintf(`{"status":{"loadBalancer":{"ingress":[{"ip":%q}]}}}`, s.ip))
	}
	h.ReadyPods("app=mig-echo", 1, 2*time.Minute)
}

// migrateMetalLB runs herald migrate on the cluster and on kubectl's dump
// of it, checks both, and returns the translation.
func migrateMetalLB(ctx context.Context, t *testing.T, h *harness.T, herald string) []byte {
	// The translation, straight into the cluster. Everything MetalLB
	// reads translates (exit 0); what it never read is not read.
	migrate := exec.CommandContext(ctx, herald, "migrate", "--from-cluster", "--kubeconfig", h.Lab.Kubeconfig)
	var stderr strings.Builder
	migrate.Stderr = &stderr
	yaml, err := migrate.Output()
	t.Logf("herald migrate --from-cluster: %v\nreport:\n%s", err, stderr.String())
	if code := migrate.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d, want 0: everything MetalLB reads translates", code)
	}
	if strings.Contains(string(yaml), "passwordSecret") || strings.Contains(string(yaml), "198.51.100.200-") || strings.Contains(string(yaml), "everything") {
		t.Errorf("the translation has an empty passwordSecret or objects of namespace default:\n%s", yaml)
	}
	// The same from files, as kubectl get -A writes them: -f honours
	// --metallb-namespace, so default's pool and advertisement are
	// skipped and named, and the output is the same.
	dump := h.Kubectl("get", "ipaddresspools.metallb.io,l2advertisements.metallb.io,bgpadvertisements.metallb.io,bgppeers.metallb.io", "-A", "-o", "yaml")
	dumpFile := filepath.Join(t.TempDir(), "metallb.yaml")
	if err := os.WriteFile(dumpFile, []byte(dump), 0o644); err != nil {
		t.Fatal(err)
	}
	fromFile := exec.CommandContext(ctx, herald, "migrate", "-f", dumpFile)
	var fileReport strings.Builder
	fromFile.Stderr = &fileReport
	fileYAML, err := fromFile.Output()
	t.Logf("herald migrate -f (kubectl get -A -o yaml): %v\nreport:\n%s", err, fileReport.String())
	if code := fromFile.ProcessState.ExitCode(); code != 0 || string(fileYAML) != string(yaml) {
		t.Errorf("herald migrate -f: exit %d, want 0 and the same output as --from-cluster:\n%s", code, fileYAML)
	}
	for _, want := range []string{"IPAddressPool default/lan is in namespace default: MetalLB reads its configuration from metallb-system only",
		"L2Advertisement default/everything is in namespace default"} {
		if !strings.Contains(fileReport.String(), want) {
			t.Errorf("herald migrate -f's report lacks %q", want)
		}
	}
	return yaml
}

// checkAdoptedAndAnswering checks that herald's controller adopted every
// address and that each answers where its pool is announced.
func checkAdoptedAndAnswering(ctx context.Context, t *testing.T, h *harness.T, start time.Time) {
	// herald's controller has adopted every address: its own pool
	// annotation appears, the address stays.
	for _, s := range metallbServices {
		h.Poll(time.Minute, s.name+" adopted by herald", func() (bool, string) {
			svc, err := h.CS.CoreV1().Services("default").Get(ctx, s.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var ips []string
			for _, in := range svc.Status.LoadBalancer.Ingress {
				ips = append(ips, in.IP)
			}
			got := fmt.Sprintf("%v pool %q", ips, svc.Annotations["herald.io/ip-allocated-from-pool"])
			return got == fmt.Sprintf("[%s] pool %q", s.ip, s.pool), got
		})
	}

	// Every address answers where its pool is announced.
	for _, s := range metallbServices {
		url := fmt.Sprintf("http://%s:%d/", s.ip, s.port)
		from, where := h.Layout.Client, "the LAN client (layer 2)"
		if s.pool == "routed" {
			from, where = h.Layout.Remote, "the remote client (BGP)"
		}
		h.Poll(2*time.Minute, fmt.Sprintf("%s answering %s", url, where), func() (bool, string) {
			page, err := harness.HTTPGetFrom(from, url)
			return err == nil && strings.Contains(page, "CLIENT VALUES:"), fmt.Sprintf("err %v", err)
		})
		t.Logf("%s (%s) answers %s, %s after herald's installation began", url, s.name, where, time.Since(start).Round(time.Millisecond))
	}
}

// checkMigratedStatus checks herald status and that no address changed.
func checkMigratedStatus(ctx context.Context, t *testing.T, h *harness.T, herald string) {
	// herald status: each address announced, none by nobody.
	out, err := exec.CommandContext(ctx, herald, "status", "--kubeconfig", h.Lab.Kubeconfig).CombinedOutput()
	t.Logf("herald status:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range metallbServices {
		proto := "layer2"
		if s.pool == "routed" {
			proto = "bgp"
		}
		found := false
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) > 2 && f[1] == s.name && f[2] == s.ip && strings.Contains(line, "("+proto) {
				found = true
			}
		}
		if !found {
			t.Errorf("herald status shows no %s announcement of %s for %s", proto, s.ip, s.name)
		}
	}
	if strings.Contains(string(out), "nobody") {
		t.Errorf("herald status shows an address nobody announces")
	}

	// No address changed; the MetalLB annotation names are pointed out.
	for _, s := range metallbServices {
		evs, err := h.CS.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + s.name})
		if err != nil {
			t.Fatal(err)
		}
		var alias bool
		for _, e := range evs.Items {
			switch e.Reason {
			case "IPAllocated", "IPReleased", "AllocationFailed":
				t.Errorf("%s: %s event %q: the address should have been kept as it was", s.name, e.Reason, e.Message)
			case "AnnotationAlias":
				alias = alias || strings.Contains(e.Message, "herald reads "+strings.SplitN(s.ann, ":", 2)[0])
			}
		}
		if !alias {
			t.Errorf("%s: no AnnotationAlias event for %s", s.name, strings.SplitN(s.ann, ":", 2)[0])
		}
	}
}
