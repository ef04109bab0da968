package kubelet

import (
	"strings"

	v1 "k8s.io/api/core/v1"
)

// DNSConfig is the cluster DNS the kubelet gives pods, as a real
// kubelet's --cluster-dns and --cluster-domain do.
type DNSConfig struct {
	// Servers are the cluster DNS Service's IPs; none: pods get the
	// node's resolver configuration whatever their policy.
	Servers []string
	// Domain is the cluster domain (cluster.local).
	Domain string
}

// resolvConf is the /etc/resolv.conf of a pod, following the kubelet's
// rules for dnsPolicy and dnsConfig:
//   - ClusterFirst (the default): the cluster DNS with the pod's
//     namespace, svc and cluster search domains, then the node's search
//     domains, and ndots:5; a hostNetwork pod gets the node's file
//     instead (unless ClusterFirstWithHostNet);
//   - Default: the node's file;
//   - None: only what dnsConfig says;
//   - dnsConfig's nameservers and searches are appended without
//     duplicates, its options override those of the same name.
//
// Without cluster DNS configured, ClusterFirst falls back to Default as
// the kubelet's does.
func resolvConf(pod *v1.Pod, cfg DNSConfig, node []byte) []byte {
	hostServers, hostSearch, hostOpts := parseResolvConf(string(node))
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = v1.DNSClusterFirst
	}
	if policy == v1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = v1.DNSDefault
	}
	if (policy == v1.DNSClusterFirst || policy == v1.DNSClusterFirstWithHostNet) && len(cfg.Servers) == 0 {
		policy = v1.DNSDefault
	}
	var servers, search []string
	var opts []string
	switch policy {
	case v1.DNSClusterFirst, v1.DNSClusterFirstWithHostNet:
		servers = append(servers, cfg.Servers...)
		if cfg.Domain != "" {
			search = append(search, pod.Namespace+".svc."+cfg.Domain, "svc."+cfg.Domain, cfg.Domain)
		}
		search = append(search, hostSearch...)
		opts = []string{"ndots:5"}
	case v1.DNSNone:
	default: // Default
		if pod.Spec.DNSConfig == nil {
			return node
		}
		servers, search, opts = hostServers, hostSearch, hostOpts
	}
	if c := pod.Spec.DNSConfig; c != nil {
		servers = appendNew(servers, c.Nameservers...)
		search = appendNew(search, c.Searches...)
		for _, o := range c.Options {
			kv := o.Name
			if o.Value != nil {
				kv += ":" + *o.Value
			}
			opts = setOption(opts, o.Name, kv)
		}
	}
	var b strings.Builder
	if len(search) > 0 {
		b.WriteString("search " + strings.Join(search, " ") + "\n")
	}
	for _, s := range servers {
		b.WriteString("nameserver " + s + "\n")
	}
	if len(opts) > 0 {
		b.WriteString("options " + strings.Join(opts, " ") + "\n")
	}
	return []byte(b.String())
}

// parseResolvConf reads nameserver, search (or domain) and options lines.
func parseResolvConf(s string) (servers, search, opts []string) {
	for _, line := range strings.Split(s, "\n") {
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			servers = append(servers, f[1])
		case "search", "domain":
			// The last of them wins, as in the resolver.
			search = append([]string(nil), f[1:]...)
		case "options":
			opts = append(opts, f[1:]...)
		}
	}
	return servers, search, opts
}

func appendNew(list []string, add ...string) []string {
	for _, a := range add {
		dup := false
		for _, x := range list {
			if x == a {
				dup = true
				break
			}
		}
		if !dup {
			list = append(list, a)
		}
	}
	return list
}

// setOption replaces the option called name (name or name:value) with kv,
// or appends kv.
func setOption(opts []string, name, kv string) []string {
	for i, o := range opts {
		if n, _, _ := strings.Cut(o, ":"); n == name {
			opts[i] = kv
			return opts
		}
	}
	return append(opts, kv)
}
