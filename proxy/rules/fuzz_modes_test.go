package rules_test

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/herald-lb/herald/proxy/internal/tracer"
	"github.com/herald-lb/herald/proxy/rules"
)

// FuzzModesAgree renders one fuzzed cluster (decodeWorld: Services of
// every kind, odd ones among them, endpoints, a node with its options)
// in both modes and traces the same flows through each: from a pod and
// from the node to every cluster IP, from outside to every external IP,
// LoadBalancer IP and NodePort on each node address. Both modes must
// reach the same endpoints with the same verdicts and the same source
// rewriting: the nftables mode is a drop-in for the iptables one, input
// the API refuses included.
func FuzzModesAgree(f *testing.F) {
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{250, 199, 7, 255, 13}, 40))
	addRandomWorlds(f, 16, 34)
	f.Fuzz(func(t *testing.T, data []byte) {
		w := decodeWorld(data)
		svcs := w.services()
		for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
			ipt := rules.Render(fam, svcs, w.eps, w.node)
			nft := rules.RenderNFT(fam, svcs, w.eps, w.node)
			a, err := tracer.Parse(string(ipt.Bytes()), rules.JumpsText())
			if err != nil {
				t.Fatalf("%s: the iptables rules do not parse: %v", fam, err)
			}
			b := tracer.NewNFT(nft.Table)
			local := familyAddrs(fam, w.node.IPs)
			a.SetLocalAddrs(local...)
			b.SetLocalAddrs(local...)
			for _, fl := range modeFlows(fam, w, svcs, local) {
				ra, errA := a.Trace(fl)
				rb, errB := b.Trace(fl)
				if (errA == nil) != (errB == nil) {
					t.Fatalf("%s %v: iptables %v, nftables %v", fam, fl, errA, errB)
				}
				if errA != nil {
					continue
				}
				ma, oka := ra.Masquerade()
				mb, okb := rb.Masquerade()
				if !slices.Equal(ra.Verdicts(), rb.Verdicts()) || !slices.Equal(ra.Endpoints(), rb.Endpoints()) || ma != mb || oka != okb {
					t.Fatalf("%s %v: the modes differ\niptables: %v %v masq %v/%v\nnftables: %v %v masq %v/%v\n%s\n%s",
						fam, fl, ra.Verdicts(), ra.Endpoints(), ma, oka, rb.Verdicts(), rb.Endpoints(), mb, okb, ra.Explain(), rb.Explain())
				}
			}
		}
	})
}

// familyAddrs are the valid addresses of one family among addrs.
func familyAddrs(fam rules.Family, addrs []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if a.IsValid() && a.Zone() == "" && a.Is4() == (fam == rules.IPv4) {
			out = append(out, a)
		}
	}
	return out
}

// modeFlows are the flows FuzzModesAgree traces: a pod (an address in
// the node's first pod CIDR, or a fixed one) and the node to each
// cluster IP; a client outside to each external and LoadBalancer IP, and
// to each NodePort on each of the node's addresses.
func modeFlows(fam rules.Family, w *fuzzWorld, svcs []rules.Service, local []netip.Addr) []tracer.Flow {
	pod, client, node := netip.MustParseAddr("10.244.7.9"), netip.MustParseAddr("203.0.113.77"), netip.MustParseAddr("192.0.2.10")
	if fam == rules.IPv6 {
		pod, client, node = netip.MustParseAddr("fd00:10:244:7::9"), netip.MustParseAddr("2001:db8:ffff::77"), netip.MustParseAddr("2001:db8::10")
	}
	for _, p := range w.node.ClusterCIDRs {
		if p.IsValid() && p.Addr().Is4() == (fam == rules.IPv4) && p.Bits() < p.Addr().BitLen() {
			pod = p.Masked().Addr().Next()
			break
		}
	}
	if len(local) > 0 {
		node = local[0]
	}
	var out []tracer.Flow
	for _, s := range svcs {
		proto := strings.ToLower(string(s.Protocol))
		if proto != "tcp" && proto != "udp" && proto != "sctp" {
			continue
		}
		port := uint16(s.Port)
		if s.Port <= 0 || s.Port > 65535 {
			continue // refused by the API: rendered by neither mode
		}
		for _, ip := range familyAddrs(fam, s.ClusterIPs) {
			out = append(out,
				tracer.Flow{Origin: tracer.Pod, Src: pod, Proto: proto, Dst: ip, Port: port},
				tracer.Flow{Origin: tracer.Node, Src: node, Proto: proto, Dst: ip, Port: port})
		}
		for _, ip := range familyAddrs(fam, s.ExternalIPs) {
			out = append(out, tracer.Flow{Origin: tracer.External, Src: client, Proto: proto, Dst: ip, Port: port})
		}
		for _, in := range s.LoadBalancerIngress {
			if ips := familyAddrs(fam, []netip.Addr{in.IP}); len(ips) == 1 {
				out = append(out, tracer.Flow{Origin: tracer.External, Src: client, Proto: proto, Dst: ips[0], Port: port})
			}
		}
		if s.NodePort > 0 && s.NodePort < 65536 {
			for _, ip := range local {
				out = append(out, tracer.Flow{Origin: tracer.External, Src: client, Proto: proto, Dst: ip, Port: uint16(s.NodePort), DstLocal: true})
			}
		}
	}
	return out
}
