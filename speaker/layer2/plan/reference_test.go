package plan

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/speaker/layer2/election"
	"github.com/herald-lb/herald/speaker/view"
)

// Compute checks the nodes once per set of advertisements (issue #19);
// on random worlds every address must still get the winner and the
// reasons election.Elect gives it alone.
// randomWorld is testInput with up to 7 more nodes, random interfaces,
// recovering and missing members, a second advertisement at random, and
// up to 12 Services, Local or not, on 10 addresses.
func randomWorld(r *rand.Rand) Input {
	ifaces := []string{"eth0", "eth1"}
	pick := func() []string {
		var out []string
		for _, i := range ifaces {
			if r.IntN(2) == 0 {
				out = append(out, i)
			}
		}
		return out
	}
	in := testInput()
	for i := range 2 + r.IntN(6) {
		n := fmt.Sprintf("extra%d", i)
		in.Nodes = append(in.Nodes, view.Node{Name: n, Labels: map[string]string{"rack": fmt.Sprint(1 + r.IntN(2))}})
		in.Members = append(in.Members, Member{Name: n})
	}
	for i := range in.Members {
		in.Members[i].Interfaces = pick()
		in.Members[i].DownInterfaces = pick()
		in.Members[i].Recovering = r.IntN(4) == 0
	}
	in.Members = in.Members[:len(in.Members)-r.IntN(3)]
	for i := range in.Nodes {
		in.Nodes[i].NetworkUnavailable = r.IntN(8) == 0
	}
	in.Config.L2Advertisements[0].Interfaces = pick()
	if r.IntN(2) == 0 {
		// A second advertisement of the same pool for one rack.
		in.Config.L2Advertisements = append(in.Config.L2Advertisements, &config.L2Advertisement{
			Name: "rack", Pools: []string{"lan"}, NodeSelectors: sel("rack", "2"), Interfaces: pick(),
			ServiceSelectors: sel("tier", "web")})
	}
	for s := range 1 + r.IntN(12) {
		sv := svc(fmt.Sprintf("s%d", s), "lan", fmt.Sprintf("192.0.2.%d", r.IntN(10)))
		if r.IntN(2) == 0 {
			sv.Labels = map[string]string{"tier": "web"}
		}
		if r.IntN(2) == 0 {
			sv.Local = true
			sv.ReadyNodes = map[string]bool{in.Nodes[r.IntN(len(in.Nodes))].Name: true}
			sv.ServingTerminatingNodes = map[string]bool{in.Nodes[r.IntN(len(in.Nodes))].Name: true}
		}
		in.Services = append(in.Services, sv)
	}
	return in
}

func TestComputeMatchesElectOnRandomWorlds(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 4))
	for world := range 300 {
		in := randomWorld(r)
		st := Compute(in)
		nodes, _, _ := electionNodes(in)
		groups, _ := view.GroupIPs(in.Config, in.Services, in.Config.L2Advertisements, ReasonNoAdvertisement, ReasonServiceNotSelected)
		for a, g := range groups {
			eip := election.IP{Addr: a, Advertisements: g.Ads}
			for _, s := range g.Services {
				eip.Services = append(eip.Services, election.Service{Local: s.Local, ReadyNodes: s.ReadyNodes, ServingTerminatingNodes: s.ServingTerminatingNodes})
			}
			winner, excluded := election.Elect(eip, nodes, election.Options{})
			ip, ok := st.Lookup(a)
			if !ok || ip.Winner != winner || !reflect.DeepEqual(ip.Excluded.Map(), excluded) {
				t.Fatalf("world %d, %s: Compute elects %q excluding %v; Elect %q excluding %v", world, a, ip.Winner, ip.Excluded, winner, excluded)
			}
		}
	}
}

// Compute from the previous State (as the speaker runs it) elects exactly
// what it elects from scratch, over random sequences of worlds where
// members come and go, recover, and lose interfaces.
func TestComputeFromPreviousMatchesFromScratch(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 5))
	for world := range 300 {
		in := randomWorld(r)
		var prev *State
		for step := range 6 {
			next := in
			next.Members = slices.Clone(in.Members)
			for i := range next.Members {
				switch r.IntN(6) {
				case 0:
					next.Members[i].Recovering = !next.Members[i].Recovering
				case 1:
					next.Members[i].DownInterfaces = nil
				}
			}
			if r.IntN(2) == 0 && len(next.Members) > 1 {
				next.Members = slices.Delete(next.Members, r.IntN(len(next.Members)), len(next.Members)-r.IntN(2))
			}
			if r.IntN(3) == 0 {
				next = randomWorld(r) // a new world: the memo must not leak into it
			}
			in = next
			want := Compute(in)
			in.Previous = prev
			got := Compute(in)
			if !reflect.DeepEqual(got.IPs, want.IPs) || !reflect.DeepEqual(got.Announcements, want.Announcements) {
				t.Fatalf("world %d step %d: from the previous state %+v; from scratch %+v", world, step, got.IPs, want.IPs)
			}
			prev = &got
		}
	}
}
