package config_test

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/v1beta1"
	"github.com/herald-lb/herald/controller/allocator"
	bgpplan "github.com/herald-lb/herald/speaker/bgp/plan"
	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
	"github.com/herald-lb/herald/speaker/view"
)

const herald = "herald-system"

func meta(name string, age int) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: herald, Generation: 1,
		CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, age, 0, 0, time.UTC))}
}

func ptr[T any](v T) *T { return &v }

// world is a working configuration with L2 and BGP Services: pool a
// (oldest) and b over layer 2, pool bgp over BGP to one peer with a
// password Secret, a BFD profile and a community alias.
func world() config.Resources {
	return config.Resources{
		Namespace: herald,
		Pools: []v1beta1.IPAddressPool{
			{ObjectMeta: meta("a", 0), Spec: v1beta1.IPAddressPoolSpec{Addresses: []v1beta1.AddressEntry{"192.0.2.0/28"}}},
			{ObjectMeta: meta("b", 1), Spec: v1beta1.IPAddressPoolSpec{Addresses: []v1beta1.AddressEntry{"198.51.100.0/28"},
				ServiceAllocation: &v1beta1.ServiceAllocation{Priority: ptr(int32(10))}}},
			{ObjectMeta: meta("bgp", 2), Spec: v1beta1.IPAddressPoolSpec{Addresses: []v1beta1.AddressEntry{"203.0.113.128/28"}}},
		},
		L2Advertisements: []v1beta1.L2Advertisement{{ObjectMeta: meta("l2", 3), Spec: v1beta1.L2AdvertisementSpec{
			IPAddressPools: []v1beta1.ObjectName{"a", "b"}, Interfaces: []v1beta1.InterfaceName{"eth0"},
			NodeSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"l2": "yes"}}}}}},
		BGPAdvertisements: []v1beta1.BGPAdvertisement{{ObjectMeta: meta("adv", 4), Spec: v1beta1.BGPAdvertisementSpec{
			IPAddressPools: []v1beta1.ObjectName{"bgp"}, Communities: []v1beta1.CommunityValue{"edge"},
			Peers: []v1beta1.ObjectName{"router"}}}},
		Peers: []v1beta1.BGPPeer{{ObjectMeta: meta("router", 5), Spec: v1beta1.BGPPeerSpec{
			MyASN: 64513, PeerASN: 64512, PeerAddress: "198.51.100.1", HoldTime: &metav1.Duration{Duration: 9 * time.Second},
			PasswordSecret: &v1beta1.SecretKeyRef{Name: "md5", Key: "password"}, BFDProfile: "fast"}}},
		Communities: []v1beta1.Community{{ObjectMeta: meta("comms", 6), Spec: v1beta1.CommunitySpec{
			Communities: []v1beta1.CommunityAlias{{Name: "edge", Value: "64512:100"}}}}},
		BFDProfiles: []v1beta1.BFDProfile{{ObjectMeta: meta("fast", 7), Spec: v1beta1.BFDProfileSpec{ReceiveInterval: ptr(uint32(300))}}},
		Secrets: []corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Name: "md5", Namespace: herald},
			Data: map[string][]byte{"password": []byte("s3cret")}}},
	}
}

// services hold one address of each pool.
var services = []view.Service{
	{Namespace: "shop", Name: "web", IPs: addrs("198.51.100.3"), Pool: "b", ReadyNodes: map[string]bool{"n1": true}},
	{Namespace: "shop", Name: "old", IPs: addrs("192.0.2.5"), Pool: "a", ReadyNodes: map[string]bool{"n1": true}},
	{Namespace: "shop", Name: "api", IPs: addrs("203.0.113.130"), Pool: "bgp", ReadyNodes: map[string]bool{"n1": true}},
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func inUse() []config.InUse {
	var out []config.InUse
	for _, s := range services {
		for _, a := range s.IPs {
			out = append(out, config.InUse{Addr: a, Service: s.Namespace + "/" + s.Name})
		}
	}
	return out
}

// accept does what the controller does after a parse: every object whose
// current generation is in force gets it recorded in status.inForce, and
// the passwords in force are copied.
func accept(t *testing.T, res *config.Resources, cfg *config.Config) {
	t.Helper()
	for _, o := range objectsOf(res) {
		st, ok := cfg.State(o.kind, o.meta.Name)
		if !ok || st.Stale || st.InForce != o.meta.Generation {
			continue
		}
		raw, err := json.Marshal(o.spec)
		if err != nil {
			t.Fatal(err)
		}
		*o.inForce = &v1beta1.InForce{Generation: o.meta.Generation, Spec: runtime.RawExtension{Raw: raw}}
	}
	res.Passwords = map[string]config.Secret{}
	for name, p := range cfg.Peers {
		if p.PasswordSecret != "" {
			res.Passwords[name] = p.Password
		}
	}
}

// speakerView is the same resources as a speaker reads them: no user
// Secrets, the passwords from the controller's copy.
func speakerView(res config.Resources) config.Resources {
	res.Secrets = nil
	res.PasswordsFromCopy = true
	return res
}

// outcome is everything the edit must not change: each Service's
// addresses after the allocator took the new pools, what a node elects
// and announces over layer 2, and the BGP sessions with their routes.
type outcome struct {
	IPs       map[string][]netip.Addr
	Displaced []allocator.Displaced
	L2        l2plan.State
	Sessions  []bgpplan.Session
	BGPIPs    []bgpplan.IP
}

func outcomeOf(t *testing.T, cfg0, cfg *config.Config) outcome {
	t.Helper()
	alloc := allocator.New()
	if _, err := alloc.SetConfig(cfg0); err != nil {
		t.Fatal(err)
	}
	for _, s := range services {
		if _, err := alloc.Adopt(allocator.Service{Namespace: s.Namespace, Name: s.Name}, s.IPs); err != nil {
			t.Fatalf("adopting %s/%s: %v", s.Namespace, s.Name, err)
		}
	}
	displaced, err := alloc.SetConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := outcome{IPs: map[string][]netip.Addr{}, Displaced: displaced}
	for _, s := range services {
		a, _ := alloc.Lookup(allocator.Key{Namespace: s.Namespace, Name: s.Name})
		out.IPs[s.Name] = a.IPs
	}
	nodes := []view.Node{{Name: "n1", Labels: map[string]string{"l2": "yes"}}}
	out.L2 = l2plan.Compute(l2plan.Input{Config: cfg, Services: services, Nodes: nodes,
		Members: []l2plan.Member{{Name: "n1", Interfaces: []string{"eth0"}}},
		Local:   l2plan.Local{Name: "n1", Interfaces: []string{"eth0"}}})
	plan := bgpplan.Compute(bgpplan.Input{Config: cfg, Services: services, Nodes: nodes, Node: "n1",
		NodeIPs: addrs("198.51.100.11")})
	out.Sessions, out.BGPIPs = plan.Sessions, plan.IPs
	return out
}

// poolNamed finds a pool of the edited Resources by name.
func poolNamed(name string) func(*config.Resources) *v1beta1.IPAddressPool {
	return func(r *config.Resources) *v1beta1.IPAddressPool {
		for i := range r.Pools {
			if r.Pools[i].Name == name {
				return &r.Pools[i]
			}
		}
		panic(name)
	}
}

type refusedEdit struct {
	name  string
	kind  string // of the object reported stale
	obj   string
	field string
	edit  func(*config.Resources)
}

// refusedEdits are TestRefusedEditsChangeNothing's: each an edit the parser
// refuses, on which object and field.
var refusedEdits = []refusedEdit{
	{"pool adds a range overlapping an older pool", config.KindIPAddressPool, "b", "spec.addresses[1]", func(r *config.Resources) {
		p := poolNamed("b")(r)
		p.Spec.Addresses = append(p.Spec.Addresses, "192.0.2.8/29")
	}},
	{"older pool adds a range another pool holds", config.KindIPAddressPool, "a", "spec.addresses[1]", func(r *config.Resources) {
		p := poolNamed("a")(r)
		p.Spec.Addresses = append(p.Spec.Addresses, "198.51.100.0/29")
	}},
	{"reversed range", config.KindIPAddressPool, "b", "spec.addresses[0]", func(r *config.Resources) {
		poolNamed("b")(r).Spec.Addresses = []v1beta1.AddressEntry{"198.51.100.15-198.51.100.0"}
	}},
	{"range holding an IP removed", config.KindIPAddressPool, "b", "spec.addresses", func(r *config.Resources) {
		poolNamed("b")(r).Spec.Addresses = []v1beta1.AddressEntry{"198.51.100.64/28"}
	}},
	{"range narrowed past an IP", config.KindIPAddressPool, "bgp", "spec.addresses", func(r *config.Resources) {
		poolNamed("bgp")(r).Spec.Addresses = []v1beta1.AddressEntry{"203.0.113.136/29"}
	}},
	{"malformed CIDR", config.KindIPAddressPool, "b", "spec.addresses[0]", func(r *config.Resources) {
		poolNamed("b")(r).Spec.Addresses = []v1beta1.AddressEntry{"198.51.100.0/33"}
	}},
	{"ranges overlapping each other", config.KindIPAddressPool, "b", "spec.addresses[1]", func(r *config.Resources) {
		poolNamed("b")(r).Spec.Addresses = []v1beta1.AddressEntry{"198.51.100.0/28", "198.51.100.8/29"}
	}},
	{"bad service selector", config.KindIPAddressPool, "b", "spec.serviceAllocation.serviceSelectors[0]", func(r *config.Resources) {
		poolNamed("b")(r).Spec.ServiceAllocation.ServiceSelectors = []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: "Bogus", Values: []string{"x"}}}}}
	}},
	{"negative priority", config.KindIPAddressPool, "b", "spec.serviceAllocation.priority", func(r *config.Resources) {
		poolNamed("b")(r).Spec.ServiceAllocation.Priority = ptr(int32(-1))
	}},
	{"BGP pool overlaps an older pool", config.KindIPAddressPool, "bgp", "spec.addresses[1]", func(r *config.Resources) {
		p := poolNamed("bgp")(r)
		p.Spec.Addresses = append(p.Spec.Addresses, "192.0.2.0/30")
	}},
	{"peer ASN to 0", config.KindBGPPeer, "router", "spec.myASN", func(r *config.Resources) { r.Peers[0].Spec.MyASN = 0 }},
	{"peer ASN and dynamicASN both", config.KindBGPPeer, "router", "spec.dynamicASN", func(r *config.Resources) {
		r.Peers[0].Spec.DynamicASN = "external"
	}},
	{"peer address not an IP", config.KindBGPPeer, "router", "spec.peerAddress", func(r *config.Resources) {
		r.Peers[0].Spec.PeerAddress = "router.example"
	}},
	{"hold time too short", config.KindBGPPeer, "router", "spec.holdTime", func(r *config.Resources) {
		r.Peers[0].Spec.HoldTime = &metav1.Duration{Duration: time.Second}
	}},
	{"keepalive longer than hold time", config.KindBGPPeer, "router", "spec.keepaliveTime", func(r *config.Resources) {
		r.Peers[0].Spec.KeepaliveTime = &metav1.Duration{Duration: 30 * time.Second}
	}},
	{"peer names a missing BFD profile", config.KindBGPPeer, "router", "spec.bfdProfile", func(r *config.Resources) {
		r.Peers[0].Spec.BFDProfile = "slow"
	}},
	{"password and passwordSecret both", config.KindBGPPeer, "router", "spec.passwordSecret", func(r *config.Resources) {
		r.Peers[0].Spec.Password = "inline"
	}},
	{"password Secret deleted", config.KindBGPPeer, "router", "spec.passwordSecret.name", func(r *config.Resources) {
		r.Secrets = nil
	}},
	{"password Secret key renamed", config.KindBGPPeer, "router", "spec.passwordSecret.key", func(r *config.Resources) {
		r.Secrets[0].Data = map[string][]byte{"pw": []byte("s3cret")}
	}},
	{"password Secret too long", config.KindBGPPeer, "router", "spec.passwordSecret", func(r *config.Resources) {
		r.Secrets[0].Data = map[string][]byte{"password": []byte(strings.Repeat("x", 81))}
	}},
	{"L2 advertisement names only missing pools", config.KindL2Advertisement, "l2", "spec.ipAddressPools[0]", func(r *config.Resources) {
		r.L2Advertisements[0].Spec.IPAddressPools = []v1beta1.ObjectName{"lan"}
	}},
	{"L2 advertisement bad node selector", config.KindL2Advertisement, "l2", "spec.nodeSelectors[0]", func(r *config.Resources) {
		r.L2Advertisements[0].Spec.NodeSelectors = []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "l2", Operator: metav1.LabelSelectorOpIn}}}}
	}},
	{"L2 advertisement interface name too long", config.KindL2Advertisement, "l2", "spec.interfaces[0]", func(r *config.Resources) {
		r.L2Advertisements[0].Spec.Interfaces = []v1beta1.InterfaceName{"a-very-long-interface-name"}
	}},
	{"BGP advertisement aggregation too long", config.KindBGPAdvertisement, "adv", "spec.aggregationLength", func(r *config.Resources) {
		r.BGPAdvertisements[0].Spec.AggregationLength = ptr(int32(33))
	}},
	{"BGP advertisement aggregation wider than the pool", config.KindBGPAdvertisement, "adv", "spec.aggregationLength", func(r *config.Resources) {
		r.BGPAdvertisements[0].Spec.AggregationLength = ptr(int32(24))
	}},
	{"BGP advertisement unknown community alias", config.KindBGPAdvertisement, "adv", "spec.communities[0]", func(r *config.Resources) {
		r.BGPAdvertisements[0].Spec.Communities = []v1beta1.CommunityValue{"edgy"}
	}},
	{"BGP advertisement names only a missing peer", config.KindBGPAdvertisement, "adv", "spec.peers[0]", func(r *config.Resources) {
		r.BGPAdvertisements[0].Spec.Peers = []v1beta1.ObjectName{"rooter"}
	}},
	{"community value malformed", config.KindCommunity, "comms", "spec.communities[0].value", func(r *config.Resources) {
		r.Communities[0].Spec.Communities[0].Value = "64512:x"
	}},
	{"community alias in use renamed", config.KindCommunity, "comms", "spec.communities", func(r *config.Resources) {
		r.Communities[0].Spec.Communities[0].Name = "edge2"
	}},
	{"BFD interval out of range", config.KindBFDProfile, "fast", "spec.receiveInterval", func(r *config.Resources) {
		r.BFDProfiles[0].Spec.ReceiveInterval = ptr(uint32(5))
	}},
}

// Every edit below is accepted by the API server (the CRD checks one
// object at a time, and some of these are fine alone) and would, without
// the version in force, move an address or withdraw an announcement or a
// route. With it: nothing changes, the edited object is reported stale
// with the field at fault, and the speakers' view agrees.
func TestRefusedEditsChangeNothing(t *testing.T) {
	edits := refusedEdits
	if len(edits) < 20 {
		t.Fatalf("only %d edits", len(edits))
	}
	for _, tc := range edits {
		t.Run(tc.name, func(t *testing.T) {
			res := world()
			res.InUse = inUse()
			cfg0, probs := config.Parse(res)
			if len(probs) > 0 {
				t.Fatalf("the world has problems: %v", probs)
			}
			accept(t, &res, cfg0)
			before := outcomeOf(t, cfg0, cfg0)
			if len(before.L2.Announcements) == 0 || len(before.Sessions) != 1 || len(before.Sessions[0].Routes) == 0 {
				t.Fatalf("the world announces nothing: L2 %+v, BGP %+v", before.L2.Announcements, before.Sessions)
			}

			tc.edit(&res)
			bumpGeneration(&res, tc.kind, tc.obj)
			cfg, probs := config.Parse(res)
			st, _ := cfg.State(tc.kind, tc.obj)
			if !st.Stale || st.InForce != 1 {
				t.Errorf("%s %s: state %+v, want stale with generation 1 in force", tc.kind, tc.obj, st)
			}
			if !hasError(probs.For(tc.kind, herald, tc.obj), tc.field) {
				t.Errorf("no error naming %s: %v", tc.field, probs)
			}
			after := outcomeOf(t, cfg0, cfg)
			if len(after.Displaced) > 0 {
				t.Errorf("displaced: %+v", after.Displaced)
			}
			compare(t, "controller", before, after)
			scfg, _ := config.Parse(speakerView(res))
			compare(t, "speaker", before, outcomeOf(t, cfg0, scfg))
			if sst, _ := scfg.State(tc.kind, tc.obj); sst.InForce != st.InForce {
				t.Errorf("the speaker has generation %d of %s %s in force, the controller %d", sst.InForce, tc.kind, tc.obj, st.InForce)
			}
			if got := st.Describe(); !strings.HasPrefix(got, "in force: generation 1") {
				t.Errorf("Describe = %q", got)
			}
		})
	}
}

func bumpGeneration(res *config.Resources, kind, name string) {
	if kind == config.KindBGPPeer && len(res.Peers) > 0 && reflect.DeepEqual(res.Peers[0].Spec, world().Peers[0].Spec) {
		return // only the Secret changed: the peer's generation stays
	}
	for _, o := range objectsOf(res) {
		if o.kind == kind && o.meta.Name == name {
			o.meta.Generation++
		}
	}
}

// object is one configuration object of Resources, by reference.
type object struct {
	kind    string
	meta    *metav1.ObjectMeta
	spec    any
	inForce **v1beta1.InForce
}

// objectsOf lists every configuration object of res.
func objectsOf(res *config.Resources) []object {
	var out []object
	add := func(kind string, m *metav1.ObjectMeta, spec any, f **v1beta1.InForce) {
		out = append(out, object{kind, m, spec, f})
	}
	for i := range res.Pools {
		o := &res.Pools[i]
		add(config.KindIPAddressPool, &o.ObjectMeta, o.Spec, &o.Status.InForce)
	}
	for i := range res.L2Advertisements {
		o := &res.L2Advertisements[i]
		add(config.KindL2Advertisement, &o.ObjectMeta, o.Spec, &o.Status.InForce)
	}
	for i := range res.BGPAdvertisements {
		o := &res.BGPAdvertisements[i]
		add(config.KindBGPAdvertisement, &o.ObjectMeta, o.Spec, &o.Status.InForce)
	}
	for i := range res.Peers {
		o := &res.Peers[i]
		add(config.KindBGPPeer, &o.ObjectMeta, o.Spec, &o.Status.InForce)
	}
	for i := range res.Communities {
		o := &res.Communities[i]
		add(config.KindCommunity, &o.ObjectMeta, o.Spec, &o.Status.InForce)
	}
	for i := range res.BFDProfiles {
		o := &res.BFDProfiles[i]
		add(config.KindBFDProfile, &o.ObjectMeta, o.Spec, &o.Status.InForce)
	}
	return out
}

func hasError(ps config.Problems, field string) bool {
	for _, p := range ps {
		if p.Severity == config.Error && p.Field == field {
			return true
		}
	}
	return false
}

func compare(t *testing.T, who string, before, after outcome) {
	t.Helper()
	if !reflect.DeepEqual(before.IPs, after.IPs) {
		t.Errorf("%s: Service IPs changed: %v -> %v", who, before.IPs, after.IPs)
	}
	if !reflect.DeepEqual(before.L2.IPs, after.L2.IPs) || !reflect.DeepEqual(before.L2.Announcements, after.L2.Announcements) {
		t.Errorf("%s: layer 2 changed:\n%+v\n%+v\n->\n%+v\n%+v", who, before.L2.IPs, before.L2.Announcements, after.L2.IPs, after.L2.Announcements)
	}
	if len(before.Sessions) != len(after.Sessions) {
		t.Fatalf("%s: sessions %d -> %d", who, len(before.Sessions), len(after.Sessions))
	}
	for i := range before.Sessions {
		b, a := before.Sessions[i], after.Sessions[i]
		if !reflect.DeepEqual(b.Peer, a.Peer) {
			t.Errorf("%s: peer changed: %+v -> %+v", who, b.Peer, a.Peer)
		}
		if !reflect.DeepEqual(b.Routes, a.Routes) {
			t.Errorf("%s: routes changed: %+v -> %+v", who, b.Routes, a.Routes)
		}
	}
	if !reflect.DeepEqual(before.BGPIPs, after.BGPIPs) {
		t.Errorf("%s: BGP decisions changed: %+v -> %+v", who, before.BGPIPs, after.BGPIPs)
	}
}

// A new invalid object has no version in force and stays out; a fixed edit
// takes effect; a deleted pool releases only its own Services.
func TestInForceLifecycle(t *testing.T) {
	res := world()
	res.InUse = inUse()
	cfg0, _ := config.Parse(res)
	accept(t, &res, cfg0)

	res.Pools = append(res.Pools, v1beta1.IPAddressPool{ObjectMeta: meta("c", 9),
		Spec: v1beta1.IPAddressPoolSpec{Addresses: []v1beta1.AddressEntry{"198.51.100.0/30"}}})
	cfg, probs := config.Parse(res)
	if st, _ := cfg.State(config.KindIPAddressPool, "c"); st.InForce != 0 || st.Stale || cfg.Pools["c"] != nil {
		t.Errorf("new overlapping pool c: state %+v, in model %v; want refused with nothing in force", st, cfg.Pools["c"] != nil)
	}
	if !hasError(probs.For(config.KindIPAddressPool, herald, "c"), "spec.addresses[0]") {
		t.Errorf("no error on c's spec.addresses[0]: %v", probs)
	}
	res.Pools = res.Pools[:3]

	// A refused edit, then the fix: the fix is in force at its generation.
	p := &res.Pools[1]
	p.Spec.Addresses, p.Generation = []v1beta1.AddressEntry{"nonsense"}, 2
	cfg, _ = config.Parse(res)
	if st, _ := cfg.State(config.KindIPAddressPool, "b"); !st.Stale || st.InForce != 1 {
		t.Fatalf("b after a bad edit: %+v", st)
	}
	if !cfg.WaitsOnAddresses() {
		t.Error("a stale pool: the decision may change with the addresses in use, yet WaitsOnAddresses is false")
	}
	accept(t, &res, cfg) // the controller records nothing for a stale object
	if p.Status.InForce.Generation != 1 {
		t.Fatalf("inForce moved to %d on a refused edit", p.Status.InForce.Generation)
	}
	p.Spec.Addresses, p.Generation = []v1beta1.AddressEntry{"198.51.100.0/27"}, 3
	cfg, probs = config.Parse(res)
	if st, _ := cfg.State(config.KindIPAddressPool, "b"); st.Stale || st.InForce != 3 || len(probs) > 0 {
		t.Fatalf("b after the fix: %+v %v", st, probs)
	}
	if cfg.WaitsOnAddresses() {
		t.Error("nothing refused, yet WaitsOnAddresses")
	}
	if !cfg.Pools["b"].Contains(netip.MustParseAddr("198.51.100.31")) {
		t.Errorf("the fixed version is not the one in force: %+v", cfg.Pools["b"])
	}

	// Deleting pool b is the user's intent: web loses its address, and
	// no other Service moves.
	res.Pools = append(res.Pools[:1], res.Pools[2:]...)
	cfg, _ = config.Parse(res)
	got := outcomeOf(t, cfg0, cfg)
	if len(got.Displaced) != 1 || got.Displaced[0].Key.Name != "web" {
		t.Errorf("displaced %+v, want web only", got.Displaced)
	}
	if len(got.IPs["old"]) != 1 || len(got.IPs["api"]) != 1 {
		t.Errorf("other Services lost their addresses: %v", got.IPs)
	}
}
