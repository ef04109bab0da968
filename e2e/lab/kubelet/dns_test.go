package kubelet

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestResolvConf(t *testing.T) {
	node := []byte("# the node's\nnameserver 192.0.2.53\nsearch example.test\noptions edns0\n")
	cluster := DNSConfig{Servers: []string{"198.19.0.10"}, Domain: "cluster.local"}
	two := "2"
	pod := func(policy v1.DNSPolicy, hostNet bool, cfg *v1.PodDNSConfig) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1"}, Spec: v1.PodSpec{DNSPolicy: policy, HostNetwork: hostNet, DNSConfig: cfg}}
	}
	clusterFirst := "search ns1.svc.cluster.local svc.cluster.local cluster.local example.test\nnameserver 198.19.0.10\noptions ndots:5\n"
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		cfg  DNSConfig
		want string
	}{
		{"default policy is ClusterFirst", pod("", false, nil), cluster, clusterFirst},
		{"ClusterFirst", pod(v1.DNSClusterFirst, false, nil), cluster, clusterFirst},
		{"hostNetwork ClusterFirst gets the node's", pod(v1.DNSClusterFirst, true, nil), cluster, string(node)},
		{"ClusterFirstWithHostNet", pod(v1.DNSClusterFirstWithHostNet, true, nil), cluster, clusterFirst},
		{"Default", pod(v1.DNSDefault, false, nil), cluster, string(node)},
		{"no cluster DNS", pod(v1.DNSClusterFirst, false, nil), DNSConfig{}, string(node)},
		{"None with dnsConfig", pod(v1.DNSNone, false, &v1.PodDNSConfig{
			Nameservers: []string{"203.0.113.1"}, Searches: []string{"a.test"},
			Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: &two}, {Name: "rotate"}},
		}), cluster, "search a.test\nnameserver 203.0.113.1\noptions ndots:2 rotate\n"},
		{"ClusterFirst plus dnsConfig", pod(v1.DNSClusterFirst, false, &v1.PodDNSConfig{
			Nameservers: []string{"198.19.0.10", "203.0.113.1"}, Searches: []string{"cluster.local", "b.test"},
			Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: &two}},
		}), cluster, "search ns1.svc.cluster.local svc.cluster.local cluster.local example.test b.test\nnameserver 198.19.0.10\nnameserver 203.0.113.1\noptions ndots:2\n"},
		{"Default plus dnsConfig", pod(v1.DNSDefault, false, &v1.PodDNSConfig{Searches: []string{"c.test"}}), cluster,
			"search example.test c.test\nnameserver 192.0.2.53\noptions edns0\n"},
	} {
		if got := string(resolvConf(tc.pod, tc.cfg, node)); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

func TestPodHostname(t *testing.T) {
	long := "a-very-long-pod-name-that-goes-on-and-on-past-the-dns-label-limit-x"
	for _, tc := range []struct {
		pod        v1.Pod
		host, fqdn string
	}{
		{v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns1"}}, "web-0", ""},
		{v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "server-pod-1", Namespace: "ns1"}, Spec: v1.PodSpec{Hostname: "hostname1"}}, "hostname1", ""},
		{v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns1"}, Spec: v1.PodSpec{Hostname: "h", Subdomain: "sub"}}, "h", "h.sub.ns1.svc.cluster.local"},
		{v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: long, Namespace: "ns1"}}, "a-very-long-pod-name-that-goes-on-and-on-past-the-dns-label-lim", ""},
	} {
		if got := podHostname(&tc.pod); got != tc.host {
			t.Errorf("%s: hostname %q, want %q", tc.pod.Name, got, tc.host)
		}
		if got := podFQDN(&tc.pod, "cluster.local"); got != tc.fqdn {
			t.Errorf("%s: fqdn %q, want %q", tc.pod.Name, got, tc.fqdn)
		}
	}
	if got := podHosts("h", "h.sub.ns1.svc.cluster.local", "198.18.1.5", ""); !strings.Contains(got, "198.18.1.5\th.sub.ns1.svc.cluster.local\th\n") {
		t.Errorf("hosts file:\n%s", got)
	}
}
