package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/e2e/harness"
)

// TestMemberlistKeyRotation rotates the speakers' memberlist key in the
// three steps docs/install.md gives, with kubectl patches of the Secret,
// while the client sends a request to each of three VIPs every 20 ms:
// no request fails, every speaker stays in one cluster of all nodes and
// is never isolated, and each VIP answers ARP with one MAC after every
// step.
func TestMemberlistKeyRotation(t *testing.T) {
	h := harness.Start(t)
	b := newBGPLab(h)
	s := b.l2
	const name, count = "rot", 3
	s.readySpeakers(2 * time.Minute)
	nodes := s.nodeNames()
	s.cleanupL2Services(name, count)
	h.Apply(l2Objects(name, "198.51.100.215-198.51.100.217", "2001:db8:0:1::215-2001:db8:0:1::217", "node1"))
	var ips []string
	for i := range count {
		svc := fmt.Sprintf("%s-%d", name, i)
		h.Kubectl("expose", "deployment", name, "--name="+svc, "--port=80", "--target-port=8080", "--type=LoadBalancer")
		ips = append(ips, ctl{h}.waitAnyIP("default", svc))
	}
	h.ReadyPods("app="+name, 1, 2*time.Minute)
	for i, ip := range ips {
		s.announcer("default", fmt.Sprintf("%s-%d", name, i), ip, time.Minute)
		h.Poll(time.Minute, ip+" answering", func() (bool, string) {
			ok, err := benchGet(h.Layout.Client, ip, time.Second)
			return ok, fmt.Sprint(err)
		})
	}

	sec, err := h.CS.CoreV1().Secrets(heraldNS).Get(h.Ctx, "herald-memberlist", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := sec.Data["secretkey"]
	fresh := make([]byte, 64)
	if _, err := rand.Read(fresh); err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	patch := func(data map[string]any) {
		body, _ := json.Marshal(map[string]any{"data": data})
		h.Kubectl("-n", heraldNS, "patch", "secret", "herald-memberlist", "--type=merge", "-p", string(body))
	}
	var probes []*probe
	for _, ip := range ips {
		probes = append(probes, h.StartProbe(h.Layout.Client, ip))
	}
	defer func() {
		for _, p := range probes {
			p.Stop()
		}
	}()

	steps := []struct {
		name string
		data map[string]any
		keys int
	}{
		{"add the new key as secretkey-next", map[string]any{"secretkey-next": b64(fresh)}, 2},
		{"make it primary, keep the old one as secretkey-old", map[string]any{"secretkey": b64(fresh), "secretkey-old": b64(old), "secretkey-next": nil}, 2},
		{"remove secretkey-old", map[string]any{"secretkey-old": nil}, 1},
	}
	for _, st := range steps {
		start := time.Now()
		patch(st.data)
		h.Poll(time.Minute, fmt.Sprintf("%s: every speaker with %d keys", st.name, st.keys), func() (bool, string) {
			ok, state := true, ""
			for _, n := range nodes {
				k, err := s.speakerMetric(n, "herald_speaker_memberlist_keys")
				state += fmt.Sprintf("%s keys=%v (%v); ", n, k, err)
				ok = ok && err == nil && int(k) == st.keys
			}
			return ok, state
		})
		// Let the new keys carry several probe and gossip rounds.
		time.Sleep(3 * time.Second)
		for _, n := range nodes {
			m, err1 := s.speakerMetric(n, "herald_speaker_members")
			iso, err2 := s.speakerMetric(n, "herald_speaker_isolated")
			if err1 != nil || err2 != nil || int(m) != len(nodes) || iso != 0 {
				t.Errorf("%s: %s sees %v members (want %d), isolated=%v (%v %v)", st.name, n, m, len(nodes), iso, err1, err2)
			}
		}
		for _, ip := range ips {
			if macs, out := s.arping(ip, 3, 2); len(macs) != 1 {
				t.Errorf("%s: arping %s: MACs %v: %s", st.name, ip, macs, out)
			}
		}
		t.Logf("%s: done, one cluster of %d, %s", st.name, len(nodes), time.Since(start).Round(time.Millisecond))
	}
	for _, p := range probes {
		p.Stop()
		sent, failed := p.Result()
		t.Logf("probe -> %s: %d requests every 20 ms during the rotation, %d failed", p.IP, sent, failed)
		if failed > 0 {
			t.Errorf("%d of %d requests to %s failed: %s", failed, sent, p.IP, p.Failures())
		}
	}
	logs := ""
	for _, n := range nodes {
		logs += b.speakerLogs(n)
	}
	for _, k := range [][]byte{old, fresh} {
		if strings.Contains(logs, string(k)) || strings.Contains(logs, b64(k)) {
			t.Error("a memberlist key appears in the speakers' logs")
		}
	}
}
