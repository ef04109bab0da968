package kubelet

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// sandbox is a pod's network: its own namespace with eth0 plugged into
// the node's pod bridge, or the node's namespace for hostNetwork pods.
type sandbox struct {
	netns    string
	hostVeth string
	ip       string
	// ip6 is the pod's IPv6 address on a dual-stack node, else empty.
	ip6         string
	hostNetwork bool
}

// setupSandbox creates the pod's network. Everything is recorded in the
// state file before it is created.
func (k *Kubelet) setupSandbox(ctx context.Context, pod *v1.Pod, logDir string) (*sandbox, error) {
	rec := PodRecord{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, LogDir: logDir}
	if pod.Spec.HostNetwork {
		k.putRecord(rec)
		sb := &sandbox{netns: k.cfg.NodeNetns, ip: k.cfg.NodeIP.String(), hostNetwork: true}
		if k.cfg.dualStack() {
			sb.ip6 = k.cfg.NodeIPv6.String()
		}
		return sb, nil
	}
	name := PodNetnsName(k.cfg.NetnsPrefix, pod.Namespace, pod.Name)
	if err := k.claimNetns(ctx, name, pod.UID); err != nil {
		return nil, err
	}
	ip, err := k.allocateIP(pod.UID)
	if err != nil {
		k.releaseNetns(name, pod.UID)
		return nil, err
	}
	sb := &sandbox{netns: name, hostVeth: HostVethName(pod.UID), ip: ip.String()}
	if k.cfg.dualStack() {
		sb.ip6 = k.cfg.podIPv6(ip).String()
	}
	rec.Netns, rec.HostVeth, rec.IP, rec.IPv6 = sb.netns, sb.hostVeth, sb.ip, sb.ip6
	k.putRecord(rec)

	node, bits := k.cfg.NodeNetns, k.cfg.PodCIDR.Bits()
	steps := [][]string{
		{"netns", "add", name},
		{"-n", name, "link", "set", "lo", "up"},
		{"-n", node, "link", "add", sb.hostVeth, "type", "veth", "peer", "name", "eth0", "netns", name},
		{"-n", node, "link", "set", sb.hostVeth, "master", k.cfg.PodBridge},
		// Hairpin mode, as the CNI bridge plugin sets it for Kubernetes
		// (hairpinMode): a pod that reaches a Service whose endpoint is
		// itself gets its packet back through the port it came in by.
		// With bridge netfilter on, the DNAT happens while the frame is
		// bridged, and without hairpin the bridge drops it.
		{"-n", node, "link", "set", sb.hostVeth, "type", "bridge_slave", "hairpin", "on"},
		{"-n", node, "link", "set", sb.hostVeth, "up"},
		{"-n", name, "addr", "add", netip.PrefixFrom(ip, bits).String(), "dev", "eth0"},
		{"-n", name, "link", "set", "eth0", "up"},
		// The way to services and other pods. It ends in the node's
		// namespace, which has no default route: nothing leaves the lab.
		{"-n", name, "route", "add", "default", "via", k.cfg.PodGateway.String()},
	}
	if sb.ip6 != "" {
		// nodad: the address is the pod's alone, and must work at once.
		steps = append(steps,
			[]string{"-n", name, "addr", "add", sb.ip6 + "/" + strconv.Itoa(k.cfg.PodCIDRv6.Bits()), "dev", "eth0", "nodad"},
			[]string{"-n", name, "-6", "route", "add", "default", "via", k.cfg.PodGatewayV6.String()})
	}
	for _, s := range steps {
		if err := ipCmd(ctx, s...); err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if rerr := removePodNetwork(cctx, k.cfg.NodeNetns, rec); rerr != nil {
				k.logf("pod %s/%s: cleaning up a failed sandbox: %v", pod.Namespace, pod.Name, rerr)
			} else {
				k.forgetPod(pod.UID)
				k.releaseIP(pod.UID)
				k.releaseNetns(name, pod.UID)
			}
			return nil, err
		}
	}
	return sb, nil
}

// teardownSandbox removes the pod's network and forgets the pod.
func (k *Kubelet) teardownSandbox(uid types.UID, sb *sandbox) error {
	k.mu.Lock()
	var rec PodRecord
	for _, p := range k.state.Pods {
		if p.UID == uid {
			rec = p
		}
	}
	k.mu.Unlock()
	if rec.UID == "" {
		rec = PodRecord{UID: uid, Netns: sb.netns, HostVeth: sb.hostVeth}
		if sb.hostNetwork {
			rec.Netns, rec.HostVeth = "", ""
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := removePodNetwork(ctx, k.cfg.NodeNetns, rec); err != nil {
		return err // keep the record, so Down tries again
	}
	k.forgetPod(uid)
	k.releaseIP(uid)
	if !sb.hostNetwork {
		k.releaseNetns(sb.netns, uid)
	}
	return nil
}

// claimNetns reserves a namespace name for a pod. A pod that replaces a
// same-named one (a StatefulSet's, after a force delete) waits until the
// old one's namespace is gone.
func (k *Kubelet) claimNetns(ctx context.Context, name string, uid types.UID) error {
	for {
		k.mu.Lock()
		owner, held := k.netnsOwner[name]
		if !held || owner == uid {
			if !held && netnsExists(name) {
				k.mu.Unlock()
				return fmt.Errorf("network namespace %s exists but is not this kubelet's (a crashed lab? run down)", name)
			}
			k.netnsOwner[name] = uid
			k.mu.Unlock()
			return nil
		}
		k.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (k *Kubelet) releaseNetns(name string, uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.netnsOwner[name] == uid {
		delete(k.netnsOwner, name)
	}
}

// allocateIP hands out the next free address of the pod CIDR after the
// last one handed out, wrapping around, from the one after the gateway up
// to the last before the broadcast address. Like CNI's host-local IPAM it
// does not reuse a just-released address at once, so a replacement pod
// gets a new IP and stale conntrack entries for the old one can be told
// apart (the UDP proxy test relies on it).
func (k *Kubelet) allocateIP(uid types.UID) (netip.Addr, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for a, owner := range k.ips {
		if owner == uid {
			return a, nil
		}
	}
	cidr := k.cfg.PodCIDR.Masked()
	first := cidr.Addr().Next()
	usable := func(a netip.Addr) bool {
		return cidr.Contains(a) && cidr.Contains(a.Next()) && a != k.cfg.PodGateway && a != cidr.Addr()
	}
	start := first
	if k.lastIP.IsValid() && cidr.Contains(k.lastIP) {
		start = k.lastIP.Next()
	}
	// At most one pass over the CIDR's addresses.
	a := start
	for range 1 << min(cidr.Addr().BitLen()-cidr.Bits(), 16) {
		if !usable(a) {
			a = first // past the broadcast address: wrap
		}
		if usable(a) {
			if _, used := k.ips[a]; !used {
				k.ips[a] = uid
				k.lastIP = a
				return a, nil
			}
		}
		a = a.Next()
	}
	return netip.Addr{}, fmt.Errorf("pod CIDR %s is full", cidr)
}

func (k *Kubelet) releaseIP(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for a, owner := range k.ips {
		if owner == uid {
			delete(k.ips, a)
		}
	}
}
