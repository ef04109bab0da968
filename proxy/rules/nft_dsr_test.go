package rules_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/herald-lb/herald/proxy/internal/tracer"
	"github.com/herald-lb/herald/proxy/maglev"
	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

const (
	dsrSeed   = 0x5eed0042
	dsrTunnel = "herald-dsr"
	dsrMask   = 0x00ff0000
)

// dsrCluster is three nodes' view of one LoadBalancer Service with
// herald.io/forwarding: dsr and four endpoints over the nodes.
type dsrCluster struct {
	f     rules.Family
	vip   netip.Addr
	svc   rules.Service
	eps   []rules.Endpoint
	marks map[string]uint32 // node -> the mark that routes to it
	nodes []string
}

func newDSRCluster(f rules.Family) *dsrCluster {
	c := &dsrCluster{f: f, nodes: []string{"node1", "node2", "node3"},
		marks: map[string]uint32{"node1": 0x10000, "node2": 0x20000, "node3": 0x30000}}
	ep := func(ip, node string) rules.Endpoint {
		return rules.Endpoint{IP: netip.MustParseAddr(ip), Port: 8080, Ready: true, Serving: true, NodeName: node}
	}
	if f == rules.IPv4 {
		c.vip = netip.MustParseAddr("198.51.100.20")
		c.svc = rules.Service{Namespace: "default", Name: "web", Protocol: rules.TCP, Port: 80, NodePort: 30080,
			ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.20")}}
		c.eps = []rules.Endpoint{ep("10.244.1.5", "node1"), ep("10.244.2.5", "node2"), ep("10.244.2.6", "node2"), ep("10.244.3.5", "node3")}
	} else {
		c.vip = netip.MustParseAddr("2001:db8::20")
		c.svc = rules.Service{Namespace: "default", Name: "web", Protocol: rules.TCP, Port: 80, NodePort: 30080,
			ClusterIPs: []netip.Addr{netip.MustParseAddr("fd00:96::20")}}
		c.eps = []rules.Endpoint{ep("fd00:244:1::5", "node1"), ep("fd00:244:2::5", "node2"), ep("fd00:244:2::6", "node2"), ep("fd00:244:3::5", "node3")}
	}
	c.svc.LoadBalancerIngress = []rules.Ingress{{IP: c.vip}}
	c.svc.Forwarding = rules.ForwardingDSR
	return c
}

func (c *dsrCluster) nodeConfig(name string) rules.NodeConfig {
	peers := map[string]uint32{}
	for n, m := range c.marks {
		if n != name {
			peers[n] = m
		}
	}
	pods := netip.MustParsePrefix("10.244.0.0/16")
	if c.f == rules.IPv6 {
		pods = netip.MustParsePrefix("fd00:244::/48")
	}
	return rules.NodeConfig{Name: name, ClusterCIDRs: []netip.Prefix{pods},
		DSR: rules.DSRConfig{Seed: dsrSeed, Tunnel: dsrTunnel, MarkMask: dsrMask, Peers: map[rules.Family]map[string]uint32{c.f: peers}}}
}

func (c *dsrCluster) render(t *testing.T, node string, svc rules.Service) rules.NFTRuleset {
	t.Helper()
	id := svc.ID()
	return rules.RenderNFT(c.f, []rules.Service{svc}, map[rules.ServicePortName][]rules.Endpoint{id: c.eps}, c.nodeConfig(node))
}

func (c *dsrCluster) nodeOfMark(m uint32) string {
	for n, v := range c.marks {
		if v == m {
			return n
		}
	}
	return ""
}

func (c *dsrCluster) nodeOfEndpoint(a netip.AddrPort) string {
	for _, e := range c.eps {
		if netip.AddrPortFrom(e.IP, uint16(e.Port)) == a {
			return e.NodeName
		}
	}
	return ""
}

// one traces f and wants exactly one certain outcome.
func one(t *testing.T, tr *tracer.NFT, f tracer.Flow) tracer.Outcome {
	t.Helper()
	res, err := tr.Trace(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outcomes) != 1 || res.Outcomes[0].Probability != 1 {
		t.Fatalf("%v: want one certain outcome, got\n%s", f, res)
	}
	return res.Outcomes[0]
}

// TestDSRSameEndpointWhicheverNodeReceives: a client's flow to the LB
// address ends at the same endpoint whichever node announces the address
// (the failover case): the receiving node DNATs flows of its own
// endpoints and marks the others, untracked, for the tunnel to the
// endpoint's node, which DNATs them to that endpoint. Nobody SNATs, so
// the pod sees the client. The endpoint is the one the Maglev table
// names, and every endpoint gets flows.
func TestDSRSameEndpointWhicheverNodeReceives(t *testing.T) {
	for _, f := range []rules.Family{rules.IPv4, rules.IPv6} {
		t.Run(f.String(), func(t *testing.T) {
			c := newDSRCluster(f)
			trs := map[string]*tracer.NFT{}
			for _, n := range c.nodes {
				rs := c.render(t, n, c.svc)
				if len(rs.Problems) > 0 {
					t.Fatalf("%s: problems %v", n, rs.Problems)
				}
				trs[n] = tracer.NewNFT(rs.Table)
			}
			var addrs []netip.AddrPort
			for _, e := range c.eps {
				addrs = append(addrs, netip.AddrPortFrom(e.IP, uint16(e.Port)))
			}
			tb, err := maglev.New(addrs)
			if err != nil {
				t.Fatal(err)
			}
			client := netip.MustParseAddr("203.0.113.7")
			if f == rules.IPv6 {
				client = netip.MustParseAddr("2001:db8:ff::7")
			}
			used := map[netip.AddrPort]int{}
			tunneled := 0
			const flows = 1000
			for port := range uint16(flows) {
				fl := tracer.Flow{Origin: tracer.External, Src: client, SrcPort: 20000 + port, Proto: "tcp", Dst: c.vip, Port: 80, InIface: "eth0"}
				h, _ := maglev.FlowHash(netip.AddrPortFrom(client, fl.SrcPort), netip.AddrPortFrom(c.vip, 80), dsrSeed)
				want := tb.Lookup(h)
				for _, n := range c.nodes {
					o := one(t, trs[n], fl)
					if o.Masquerade {
						t.Fatalf("%s receiving %v: masqueraded: the pod would not see the client\n%v", n, fl, o.Trail)
					}
					got, at := o.Dst, n
					if !o.DNAT {
						if !o.NoTrack || o.RouteMark&dsrMask == 0 {
							t.Fatalf("%s receiving %v: neither DNATed nor tunneled: %+v", n, fl, o)
						}
						at = c.nodeOfMark(o.RouteMark)
						if at == "" || at == n {
							t.Fatalf("%s receiving %v: mark %#x routes to no other node", n, fl, o.RouteMark)
						}
						tunneled++
						in := fl
						in.InIface = dsrTunnel
						o2 := one(t, trs[at], in)
						if !o2.DNAT || o2.Masquerade || o2.NoTrack {
							t.Fatalf("%s receiving %v from the tunnel: %+v\n%v", at, fl, o2, o2.Trail)
						}
						got = o2.Dst
					}
					if got != want {
						t.Fatalf("%s receiving %v: endpoint %s, the table names %s", n, fl, got, want)
					}
					if c.nodeOfEndpoint(got) != at {
						t.Fatalf("%s receiving %v: DNATed on %s to %s, which runs on %s", n, fl, at, got, c.nodeOfEndpoint(got))
					}
				}
				used[want]++
			}
			if len(used) != len(c.eps) {
				t.Errorf("flows reached %d of %d endpoints: %v", len(used), len(c.eps), used)
			}
			t.Logf("%d flows x 3 receiving nodes: %d tunneled; per endpoint %v", flows, tunneled, used)
		})
	}
}

// TestDSRLeavesOtherTrafficAlone: pods and the NodePort take the usual
// path (pods are never untracked; the NodePort still SNATs), and a
// Service without the annotation renders no DSR chain at all.
func TestDSRLeavesOtherTrafficAlone(t *testing.T) {
	c := newDSRCluster(rules.IPv4)
	rs := c.render(t, "node1", c.svc)
	tr := tracer.NewNFT(rs.Table)
	pod := tracer.Flow{Origin: tracer.Pod, Src: netip.MustParseAddr("10.244.1.9"), SrcPort: 40000, Proto: "tcp", Dst: c.vip, Port: 80, InIface: "veth1"}
	res, err := tr.Trace(pod)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range res.Outcomes {
		if o.NoTrack || !o.DNAT {
			t.Errorf("pod to the LB address: %+v", o)
		}
	}
	np := tracer.Flow{Origin: tracer.External, Src: netip.MustParseAddr("203.0.113.7"), SrcPort: 40000, Proto: "tcp",
		Dst: netip.MustParseAddr("192.0.2.11"), Port: 30080, DstLocal: true, InIface: "eth0"}
	res, err = tr.Trace(np)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range res.Outcomes {
		if o.NoTrack || !o.Masquerade {
			t.Errorf("NodePort under Cluster: want the usual SNAT, got %+v", o)
		}
	}

	plain := c.svc
	plain.Forwarding = rules.ForwardingSNAT
	text := c.render(t, "node1", plain).Table.Text()
	for _, name := range []string{rules.NFTPrefixDSR, rules.NFTPrefixDSRRaw, rules.NFTPrefixDSRMarks, rules.NFTPrefixDSREndpts} {
		if strings.Contains(text, name) {
			t.Errorf("a Service without DSR rendered %s objects", name)
		}
	}
}

// TestDSRRefused: what DSR cannot serve keeps SNAT forwarding, with a
// problem naming the Service and the reason, and still works.
func TestDSRRefused(t *testing.T) {
	c := newDSRCluster(rules.IPv4)
	local := c.svc
	local.ExternalTrafficPolicy = rules.PolicyLocal
	affinity := c.svc
	affinity.SessionAffinity = rules.AffinityClientIP
	ranges := c.svc
	ranges.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	for _, tc := range []struct {
		name string
		svc  rules.Service
		node rules.NodeConfig
		want string
	}{
		{"eTP Local", local, c.nodeConfig("node1"), "externalTrafficPolicy Local"},
		{"affinity", affinity, c.nodeConfig("node1"), "sessionAffinity"},
		{"source ranges", ranges, c.nodeConfig("node1"), "loadBalancerSourceRanges"},
		{"no tunnel", c.svc, rules.NodeConfig{Name: "node1"}, "no DSR tunnel"},
		{"peer unknown", c.svc, func() rules.NodeConfig {
			n := c.nodeConfig("node1")
			delete(n.DSR.Peers[rules.IPv4], "node3")
			return n
		}(), "no working tunnel to node node3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := rules.RenderNFT(rules.IPv4, []rules.Service{tc.svc}, map[rules.ServicePortName][]rules.Endpoint{tc.svc.ID(): c.eps}, tc.node)
			var msgs []string
			for _, p := range rs.Problems {
				msgs = append(msgs, p.Error())
			}
			all := strings.Join(msgs, "\n")
			if !strings.Contains(all, tc.want) || !strings.Contains(all, "service default/web") || !strings.Contains(all, "forwarding stays SNAT") {
				t.Errorf("problems %q, want one naming the Service and %q", all, tc.want)
			}
			if strings.Contains(rs.Table.Text(), rules.NFTPrefixDSR) {
				t.Error("refused, yet DSR chains rendered")
			}
			client := netip.MustParseAddr("203.0.113.7")
			res, err := tracer.NewNFT(rs.Table).Trace(tracer.Flow{Origin: tracer.External, Src: client, SrcPort: 1234, Proto: "tcp", Dst: c.vip, Port: 80, InIface: "eth0"})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Outcomes) == 0 || !res.Outcomes[0].DNAT {
				t.Errorf("the Service no longer works: %s", res)
			}
		})
	}
	rs := rules.Render(rules.IPv4, []rules.Service{c.svc}, map[rules.ServicePortName][]rules.Endpoint{c.svc.ID(): c.eps}, c.nodeConfig("node1"))
	found := false
	for _, p := range rs.Problems {
		found = found || strings.Contains(p.Error(), "needs the nftables mode")
	}
	if !found {
		t.Errorf("iptables mode: problems %v, want the nftables mode named", rs.Problems)
	}
}

// TestDSRBadNodeConfig: a DSR configuration that cannot work turns the
// mode off, reported, and nothing else changes.
func TestDSRBadNodeConfig(t *testing.T) {
	c := newDSRCluster(rules.IPv4)
	for _, tc := range []struct {
		name string
		edit func(*rules.DSRConfig)
		want string
	}{
		{"seed 0", func(d *rules.DSRConfig) { d.Seed = 0 }, "dsr.seed"},
		{"mask overlaps masquerade", func(d *rules.DSRConfig) { d.MarkMask = 0xffff }, "dsr.markMask"},
		{"tunnel name", func(d *rules.DSRConfig) { d.Tunnel = "a name too long for linux" }, "dsr.tunnel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := c.nodeConfig("node1")
			tc.edit(&n.DSR)
			rs := rules.RenderNFT(rules.IPv4, []rules.Service{c.svc}, map[rules.ServicePortName][]rules.Endpoint{c.svc.ID(): c.eps}, n)
			if !strings.Contains(fmt.Sprint(rs.Problems), tc.want) {
				t.Errorf("problems %v, want %s", rs.Problems, tc.want)
			}
			if rs.Table.Chain(rules.NFTChainDSRPrerouting) != nil {
				t.Error("the raw chain is there")
			}
		})
	}
	if m := nft.PriorityRaw; m >= nft.PriorityDstNAT {
		t.Fatal("raw priority must come before dstnat")
	}
}
