package election

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/herald-lb/herald/config"
)

// referenceScore and referenceRank are the election as first written
// (issue #19 made it hash once per candidate, on the stack): the
// optimised one must pick the same winners and the same order.
func referenceScore(node string, ip netip.Addr) uint64 {
	h := sha256.New()
	h.Write([]byte(node))
	h.Write([]byte{0})
	b, _ := ip.MarshalBinary()
	h.Write(b)
	return binary.BigEndian.Uint64(h.Sum(nil)[:8])
}

func referenceRank(ip netip.Addr, candidates []string) []string {
	out := append([]string(nil), candidates...)
	sort.Slice(out, func(i, j int) bool {
		si, sj := referenceScore(out[i], ip), referenceScore(out[j], ip)
		if si != sj {
			return si > sj
		}
		return out[i] < out[j]
	})
	return out
}

func TestWinnerMatchesReferenceOnRandomWorlds(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 2))
	for world := range 300 {
		var cand []string
		for i := range r.IntN(40) {
			cand = append(cand, fmt.Sprintf("n%d-%d", world, i*r.IntN(7)))
		}
		if r.IntN(10) == 0 {
			cand = append(cand, string(make([]byte, 200+r.IntN(60)))) // longer than the stack buffer
		}
		var ip netip.Addr
		switch r.IntN(3) {
		case 0:
			ip = netip.AddrFrom4([4]byte{198, 51, 100, byte(r.IntN(256))})
		case 1:
			ip = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(r.IntN(256))})
		default:
			ip = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(r.IntN(256))}).WithZone("eth0")
		}
		want := referenceRank(ip, cand)
		if got := Rank(ip, cand); !slices.Equal(got, want) {
			t.Fatalf("Rank(%s, %q) = %q, reference %q", ip, cand, got, want)
		}
		w := ""
		if len(want) > 0 {
			w = want[0]
		}
		if got := Winner(ip, cand); got != w {
			t.Fatalf("Winner(%s, %q) = %q, reference %q", ip, cand, got, w)
		}
	}
}

// referenceCandidates is Candidates as first written, checking every
// node for every IP.
func referenceCandidates(ip IP, nodes []Node, opts Options) ([]string, map[string]string) {
	excluded := map[string]string{}
	localNeed := localRequirement(ip.Services)
	var candidates, recovering []string
	for _, n := range nodes {
		if why := ineligible(n, ip, opts, localNeed); why != "" {
			excluded[n.Name] = why
			continue
		}
		if n.Recovering {
			recovering = append(recovering, n.Name)
			continue
		}
		candidates = append(candidates, n.Name)
	}
	byName := map[string]Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	// Out of its hold but counted out with one still in it: waits too,
	// unless every speaker does not do so yet, or no healthy node would
	// be left.
	together := true
	for _, n := range nodes {
		together = together && (!n.Live || n.HoldsTogether)
	}
	heldTogether := map[string]bool{}
	if together {
		var rest []string
		for _, c := range candidates {
			for _, r := range recovering {
				if Together(byName[c], byName[r]) {
					heldTogether[c] = true
				}
			}
			if !heldTogether[c] {
				rest = append(rest, c)
			}
		}
		if len(rest) == 0 {
			clear(heldTogether)
		} else {
			candidates = rest
		}
	}
	if len(candidates) == 0 {
		candidates = recovering
	} else {
		healthy := slices.Clone(candidates)
		for _, r := range recovering {
			peer := true
			for _, h := range healthy {
				peer = peer && Together(byName[r], byName[h])
			}
			if peer {
				candidates = append(candidates, r)
			} else {
				excluded[r] = ReasonRecovering
			}
		}
		for c := range heldTogether {
			excluded[c] = ReasonHeldTogether
		}
	}
	sort.Strings(candidates)
	return candidates, excluded
}

// epoch is an arbitrary moment the tests' count-outs are placed around.
var epoch = time.Date(2026, 11, 28, 0, 34, 33, 0, time.UTC)

func TestCandidatesMatchReferenceOnRandomWorlds(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 3))
	racks := []*config.L2Advertisement{anyNode, {Name: "rack1", Pools: []string{"lan"}, NodeSelectors: config.Selectors{
		config.SelectorFromLabels(map[string]string{"rack": "1"})}, Interfaces: []string{"eth1"}}}
	for world := range 5000 {
		ns := nodes(1 + r.IntN(8))
		for i := range ns {
			ns[i].Live = r.IntN(6) != 0
			ns[i].NetworkUnavailable = r.IntN(8) == 0
			ns[i].Recovering = r.IntN(3) == 0
			ns[i].HoldsTogether = r.IntN(10) != 0
			if r.IntN(2) == 0 { // counted out at one of a few moments, some together
				ns[i].CountedOutAt = epoch.Add(time.Duration(r.IntN(4)) * 4 * time.Second)
			}
			if r.IntN(3) == 0 {
				ns[i].Interfaces = append(ns[i].Interfaces, "eth1")
			}
			if r.IntN(4) == 0 {
				ns[i].DownInterfaces = []string{"eth0"}
			}
		}
		ip := IP{Addr: netip.AddrFrom4([4]byte{198, 51, 100, byte(world)}), Advertisements: racks[:1+r.IntN(2)]}
		if r.IntN(5) == 0 {
			ip.Advertisements = nil
		}
		el := Eligible(ip.Advertisements, ns, Options{})
		for range 3 {
			ip.Services = nil
			for range r.IntN(3) {
				s := Service{Local: r.IntN(2) == 0, ReadyNodes: map[string]bool{}, ServingTerminatingNodes: map[string]bool{}}
				for _, n := range ns {
					if r.IntN(3) == 0 {
						s.ReadyNodes[n.Name] = true
					}
					if r.IntN(3) == 0 {
						s.ServingTerminatingNodes[n.Name] = true
					}
				}
				ip.Services = append(ip.Services, s)
			}
			wantC, wantE := referenceCandidates(ip, ns, Options{})
			gotC, gotX, _ := el.Candidates(ip.Services)
			gotE := gotX.Map()
			if !slices.Equal(gotC, wantC) || !reflect.DeepEqual(gotE, wantE) {
				t.Fatalf("world %d: candidates %q excluded %v; reference %q %v", world, gotC, gotE, wantC, wantE)
			}
		}
	}
}
