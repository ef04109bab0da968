package config

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/herald-lb/herald/config/v1beta1"
)

// Resources is everything the parser reads.
type Resources struct {
	// Namespace, when set, is the one namespace herald reads configuration
	// from; objects in other namespaces are reported and ignored. Objects
	// with no namespace (files meant for `kubectl apply -n`) count as in it.
	Namespace string

	Pools             []v1beta1.IPAddressPool
	L2Advertisements  []v1beta1.L2Advertisement
	BGPAdvertisements []v1beta1.BGPAdvertisement
	Peers             []v1beta1.BGPPeer
	Communities       []v1beta1.Community
	BFDProfiles       []v1beta1.BFDProfile
	Secrets           []corev1.Secret

	// SecretsUnavailable says the caller cannot see Secrets (herald validate
	// on files that do not include them): passwordSecret references are then
	// not checked and peers keep an empty password.
	SecretsUnavailable bool

	// InUse are the addresses Services hold (from their status). A pool
	// edit that would drop one of them from the pool is refused.
	InUse []InUse
	// Passwords are the BGP passwords in force, by BGPPeer name: the
	// controller's copy (Secret herald-bgp-passwords). A peer whose
	// passwordSecret no longer resolves keeps the password it had.
	Passwords map[string]Secret
	// PasswordsFromCopy makes every passwordSecret resolve from Passwords
	// alone: the speakers read no user Secrets, only the controller's copy.
	PasswordsFromCopy bool
}

// InUse is an address a Service holds.
type InUse struct {
	Addr netip.Addr
	// Service is "namespace/name", for messages.
	Service string
}

// Parse validates the resources and returns the model of every object that
// has no errors, with all problems found, sorted.
func Parse(in Resources) (*Config, Problems) {
	p := &parser{in: in, cfg: &Config{
		Pools:       map[string]*Pool{},
		Peers:       map[string]*Peer{},
		BFDProfiles: map[string]*BFDProfile{},
		Communities: map[string]Community{},
		Objects:     map[string]ObjectState{},
	}, aliases: map[string]aliasDef{}, brokenPools: map[string]bool{}, brokenPeers: map[string]bool{}}
	p.secrets = map[string]map[string][]byte{}
	for i := range in.Secrets {
		s := &in.Secrets[i]
		if p.inScope(s.Namespace) {
			p.secrets[s.Namespace+"/"+s.Name] = s.Data
		}
	}

	for _, o := range ordered(p, KindBFDProfile, in.BFDProfiles, func(o *v1beta1.BFDProfile) *metav1.ObjectMeta { return &o.ObjectMeta }) {
		resolve(p, KindBFDProfile, o, &o.ObjectMeta, o.Status.InForce, func(o *v1beta1.BFDProfile) *v1beta1.BFDProfileSpec { return &o.Spec }, p.bfdProfile)
	}
	for _, o := range ordered(p, KindCommunity, in.Communities, func(o *v1beta1.Community) *metav1.ObjectMeta { return &o.ObjectMeta }) {
		resolve(p, KindCommunity, o, &o.ObjectMeta, o.Status.InForce, func(o *v1beta1.Community) *v1beta1.CommunitySpec { return &o.Spec }, p.community)
	}
	pools := ordered(p, KindIPAddressPool, in.Pools, func(o *v1beta1.IPAddressPool) *metav1.ObjectMeta { return &o.ObjectMeta })
	p.reserve(pools)
	for _, o := range pools {
		resolve(p, KindIPAddressPool, o, &o.ObjectMeta, o.Status.InForce, func(o *v1beta1.IPAddressPool) *v1beta1.IPAddressPoolSpec { return &o.Spec }, p.pool)
	}
	for _, o := range ordered(p, KindBGPPeer, in.Peers, func(o *v1beta1.BGPPeer) *metav1.ObjectMeta { return &o.ObjectMeta }) {
		resolve(p, KindBGPPeer, o, &o.ObjectMeta, o.Status.InForce, func(o *v1beta1.BGPPeer) *v1beta1.BGPPeerSpec { return &o.Spec }, p.peer)
	}
	for _, o := range ordered(p, KindL2Advertisement, in.L2Advertisements, func(o *v1beta1.L2Advertisement) *metav1.ObjectMeta { return &o.ObjectMeta }) {
		resolve(p, KindL2Advertisement, o, &o.ObjectMeta, o.Status.InForce, func(o *v1beta1.L2Advertisement) *v1beta1.L2AdvertisementSpec { return &o.Spec }, p.l2Advertisement)
	}
	for _, o := range ordered(p, KindBGPAdvertisement, in.BGPAdvertisements, func(o *v1beta1.BGPAdvertisement) *metav1.ObjectMeta { return &o.ObjectMeta }) {
		resolve(p, KindBGPAdvertisement, o, &o.ObjectMeta, o.Status.InForce, func(o *v1beta1.BGPAdvertisement) *v1beta1.BGPAdvertisementSpec { return &o.Spec }, p.bgpAdvertisement)
	}
	p.checkAdvertised(pools)
	SortProblems(p.problems)
	return p.cfg, p.problems
}

// checkAdvertised marks the pools the advertisements in force select, and
// warns about the others: MetalLB users' most asked question is why an IP
// from such a pool does not answer.
func (p *parser) checkAdvertised(pools []*v1beta1.IPAddressPool) {
	covered := map[string]bool{}
	for _, a := range p.cfg.L2Advertisements {
		for _, n := range a.Pools {
			covered[n] = true
		}
	}
	for _, a := range p.cfg.BGPAdvertisements {
		for _, n := range a.Pools {
			covered[n] = true
		}
	}
	for _, o := range pools {
		pool := p.cfg.Pools[o.Name]
		if pool == nil {
			continue
		}
		if pool.Advertised = covered[o.Name]; pool.Advertised {
			continue
		}
		r := p.reporter(KindIPAddressPool, &o.ObjectMeta)
		r.add("", Warning, "no L2Advertisement or BGPAdvertisement selects this pool: Services get IPs from it that no node announces; add an advertisement that names it in spec.ipAddressPools or selects its labels")
		r.last().Code = CodeNotAdvertised
	}
}

type parser struct {
	in       Resources
	cfg      *Config
	problems Problems
	secrets  map[string]map[string][]byte
	aliases  map[string]aliasDef
	// owned holds the accepted pools' ranges sorted by address; they never
	// overlap, so one binary search finds a clash.
	owned []ownedRange
	// acceptedPeers in the order accepted, for conflict checks.
	acceptedPeers []*peerEntry
	// broken* name objects left out, for clearer messages in references.
	brokenPools map[string]bool
	brokenPeers map[string]bool

	// fallback is set while the version in force is parsed because the
	// current one was refused: a peer may then use its stored password.
	fallback bool
	// reserved are the ranges of the pools' versions in force; an edit of
	// another pool may not take them, whatever the pools' ages.
	reserved []ownedRange
	// inForceRanges are each pool's ranges in force, for the in-use check.
	inForceRanges map[string][]Range
}

type ownedRange struct {
	r     Range
	pool  string
	field string
}

type peerEntry struct {
	peer      *Peer
	selectors []string // canonical selector strings
}

func (p *parser) inScope(ns string) bool {
	return p.in.Namespace == "" || ns == "" || ns == p.in.Namespace
}

func (p *parser) reporter(kind string, m *metav1.ObjectMeta) *reporter {
	return &reporter{kind: kind, namespace: m.Namespace, name: m.Name, out: &p.problems}
}

// ordered drops objects outside the namespace, nameless and duplicate
// objects, and returns the rest oldest first (then by name). Age order is what
// decides which of two clashing objects wins, so a new object can never take
// addresses or sessions away from one that was already working.
func ordered[T any](p *parser, kind string, items []T, meta func(*T) *metav1.ObjectMeta) []*T {
	out := make([]*T, 0, len(items))
	seen := map[string]bool{}
	for i := range items {
		o := &items[i]
		m := meta(o)
		r := p.reporter(kind, m)
		switch {
		case !p.inScope(m.Namespace):
			r.warnf("metadata.namespace", "herald reads configuration only from namespace %q; this object is ignored", p.in.Namespace)
		case m.Name == "":
			r.errorf("metadata.name", "must be set")
		case seen[m.Name]:
			r.errorf("metadata.name", "another %s has the same name; the first one is used", kind)
		default:
			seen[m.Name] = true
			out = append(out, o)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := meta(out[i]), meta(out[j])
		// No timestamp means not yet created (a file about to be applied):
		// newer than anything in the cluster.
		if az, bz := a.CreationTimestamp.IsZero(), b.CreationTimestamp.IsZero(); az != bz {
			return bz
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	return out
}

func indexed(field string, i int) string { return fmt.Sprintf("%s[%d]", field, i) }

// --- BFDProfile -----------------------------------------------------------

func (p *parser) bfdProfile(o *v1beta1.BFDProfile, r *reporter) {
	s := o.Spec
	prof := &BFDProfile{
		Name:             o.Name,
		ReceiveInterval:  uintOr(r, "spec.receiveInterval", s.ReceiveInterval, DefaultBFDInterval, 10, 60000),
		TransmitInterval: uintOr(r, "spec.transmitInterval", s.TransmitInterval, DefaultBFDInterval, 10, 60000),
		DetectMultiplier: uintOr(r, "spec.detectMultiplier", s.DetectMultiplier, DefaultBFDMultiplier, 2, 255),
	}
	// The speakers run GoBGP's BFD: control packets only, always active,
	// single-hop (sent with TTL 255, received without a TTL check). The
	// API keeps MetalLB's fields, but a setting asking for more than that
	// is said to have no effect rather than taken silently.
	if s.EchoMode != nil && *s.EchoMode {
		r.warnf("spec.echoMode", "true has no effect: herald's BFD has no echo function; the session is checked by control packets at receiveInterval and transmitInterval only")
	}
	if s.EchoInterval != nil {
		uintOr(r, "spec.echoInterval", s.EchoInterval, 0, 10, 60000)
		r.warnf("spec.echoInterval", "has no effect: herald's BFD has no echo function")
	}
	if s.PassiveMode != nil && *s.PassiveMode {
		r.warnf("spec.passiveMode", "true has no effect: herald's speakers always start the BFD session themselves")
	}
	if s.MinimumTTL != nil {
		uintOr(r, "spec.minimumTtl", s.MinimumTTL, 0, 1, 254)
		r.warnf("spec.minimumTtl", "has no effect: herald's BFD sessions are single-hop, sent with TTL 255, and the TTL of what they receive is not checked")
	}
	if r.ok() {
		p.cfg.BFDProfiles[o.Name] = prof
	}
}

func uintOr(r *reporter, field string, v *uint32, def, min, max uint32) uint32 {
	if v == nil {
		return def
	}
	if *v < min || *v > max {
		r.errorf(field, "%d is out of range: must be between %d and %d", *v, min, max)
	}
	return *v
}

// --- Community ------------------------------------------------------------

func (p *parser) community(o *v1beta1.Community, r *reporter) {
	if len(o.Spec.Communities) == 0 {
		r.errorf("spec.communities", "must define at least one alias")
	}
	defs := map[string]Community{}
	for i, a := range o.Spec.Communities {
		field := indexed("spec.communities", i)
		if !aliasName.MatchString(a.Name) || len(a.Name) > 63 {
			r.errorf(field+".name", "%q is not a valid alias name: use up to 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit", a.Name)
			continue
		}
		if _, dup := defs[a.Name]; dup {
			r.errorf(field+".name", "alias %q is defined twice in this object", a.Name)
			continue
		}
		if _, wk := wellKnownCommunities[a.Name]; wk {
			r.errorf(field+".name", "%q is the name of a well-known community and cannot be redefined", a.Name)
			continue
		}
		if !strings.Contains(string(a.Value), ":") {
			r.errorf(field+".value", "%q: an alias value must be a community number (ASN:value or large:ASN:value1:value2), not another alias", a.Value)
			continue
		}
		c, err := ParseCommunity(string(a.Value))
		if err != nil {
			r.errorf(field+".value", "%v", err)
			continue
		}
		if prev, ok := p.aliases[a.Name]; ok && prev.broken == "" && prev.value != c {
			r.errorf(field+".name", "alias %q is already defined as %s by Community %s", a.Name, prev.value, prev.from)
			continue
		}
		defs[a.Name] = c
	}
	if !p.fallback {
		p.checkAliasesInUse(r, o, defs)
	}
	for name, c := range defs {
		if prev, ok := p.aliases[name]; ok && prev.broken == "" {
			continue // an older valid object defines it (same value, or already reported)
		}
		if r.ok() {
			p.aliases[name] = aliasDef{value: c, from: o.Name}
			p.cfg.Communities[name] = c
		} else {
			p.aliases[name] = aliasDef{from: o.Name, broken: o.Name}
		}
	}
}

// --- IPAddressPool --------------------------------------------------------

func (p *parser) pool(o *v1beta1.IPAddressPool, r *reporter) {
	s := o.Spec
	pool := &Pool{Name: o.Name, Labels: o.Labels, AutoAssign: s.AutoAssign == nil || *s.AutoAssign, AvoidBuggyIPs: s.AvoidBuggyIPs}
	if len(s.Addresses) == 0 {
		r.errorf("spec.addresses", "must list at least one CIDR or range")
	}
	fields := make([]string, 0, len(s.Addresses))
	for i, e := range s.Addresses {
		field := indexed("spec.addresses", i)
		rg, err := ParseAddressEntry(string(e))
		if err != nil {
			r.errorf(field, "%v", err)
			continue
		}
		for j, prev := range pool.Ranges {
			if prev.Overlaps(rg) {
				r.errorf(field, "%s overlaps %s (%s) of the same pool", e, fields[j], prev)
			}
		}
		pool.Ranges = append(pool.Ranges, rg)
		fields = append(fields, field)
	}
	if a := s.ServiceAllocation; a != nil {
		pool.Allocation = p.allocation(r, a)
	}
	// Clashes with older pools are checked only for otherwise valid pools,
	// so a broken pool never shadows addresses.
	if r.ok() {
		for i, rg := range pool.Ranges {
			if c := p.clash(rg); c != nil {
				r.errorf(fields[i], "%s overlaps IPAddressPool %s (%s %s); an address may belong to one pool only, and the older pool keeps it", rg, c.pool, c.field, c.r)
			}
		}
	}
	if r.ok() && !p.fallback {
		p.checkReserved(r, o.Name, pool.Ranges, fields)
		p.checkInUse(r, o.Name, pool)
	}
	if !r.ok() {
		p.brokenPools[o.Name] = true
		return
	}
	delete(p.brokenPools, o.Name)
	for i, rg := range pool.Ranges {
		p.own(ownedRange{r: rg, pool: o.Name, field: fields[i]})
	}
	p.cfg.Pools[o.Name] = pool
}

// clash returns an accepted range overlapping rg, if any.
func (p *parser) clash(rg Range) *ownedRange {
	i := sort.Search(len(p.owned), func(i int) bool { return p.owned[i].r.Last.Compare(rg.First) >= 0 })
	if i < len(p.owned) && p.owned[i].r.Overlaps(rg) {
		return &p.owned[i]
	}
	return nil
}

func (p *parser) own(o ownedRange) {
	i := sort.Search(len(p.owned), func(i int) bool { return p.owned[i].r.First.Compare(o.r.First) > 0 })
	p.owned = append(p.owned, ownedRange{})
	copy(p.owned[i+1:], p.owned[i:])
	p.owned[i] = o
}

func (p *parser) allocation(r *reporter, a *v1beta1.ServiceAllocation) *Allocation {
	out := &Allocation{}
	if a.Priority != nil {
		if *a.Priority < 0 {
			r.errorf("spec.serviceAllocation.priority", "%d is negative: priorities start at 0 (tried first)", *a.Priority)
		}
		out.Priority, out.HasPriority = int(*a.Priority), true
	}
	for i, ns := range a.Namespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			r.errorf(indexed("spec.serviceAllocation.namespaces", i), "%q is not a namespace name: %s", ns, strings.Join(errs, "; "))
			continue
		}
		out.Namespaces = append(out.Namespaces, ns)
	}
	out.NamespaceSelectors = parseSelectors(r, "spec.serviceAllocation.namespaceSelectors", a.NamespaceSelectors)
	out.ServiceSelectors = parseSelectors(r, "spec.serviceAllocation.serviceSelectors", a.ServiceSelectors)
	if a.Priority == nil && len(a.Namespaces) == 0 && len(a.NamespaceSelectors) == 0 && len(a.ServiceSelectors) == 0 {
		r.errorf("spec.serviceAllocation", "must set at least one of priority, namespaces, namespaceSelectors or serviceSelectors")
	}
	return out
}

// --- BGPPeer --------------------------------------------------------------

func (p *parser) peer(o *v1beta1.BGPPeer, r *reporter) {
	s := o.Spec
	peer := &Peer{Name: o.Name, MyASN: s.MyASN, PeerASN: s.PeerASN, DynamicASN: string(s.DynamicASN),
		EBGPMultiHop: s.EBGPMultiHop, GracefulRestart: s.EnableGracefulRestart}
	if s.MyASN == 0 {
		r.errorf("spec.myASN", "must be set to an AS number between 1 and 4294967295")
	}
	switch {
	case s.PeerASN != 0 && s.DynamicASN != "":
		r.errorf("spec.dynamicASN", "peerASN and dynamicASN are mutually exclusive: set one")
	case s.PeerASN == 0 && s.DynamicASN == "":
		r.errorf("spec.peerASN", "one of peerASN and dynamicASN must be set")
	case s.DynamicASN != "" && s.DynamicASN != v1beta1.DynamicASNInternal && s.DynamicASN != v1beta1.DynamicASNExternal:
		r.errorf("spec.dynamicASN", "%q is not supported: use \"internal\" or \"external\"", s.DynamicASN)
	}

	addr, err := parseIP(s.PeerAddress)
	if err != nil {
		r.errorf("spec.peerAddress", "%v", err)
	}
	peer.Address = addr
	if s.SourceAddress != "" {
		src, err := parseIP(s.SourceAddress)
		switch {
		case err != nil:
			r.errorf("spec.sourceAddress", "%v", err)
		case addr.IsValid() && src.Is4() != addr.Is4():
			r.errorf("spec.sourceAddress", "%s is not of the same IP family as peerAddress %s", src, addr)
		}
		peer.SourceAddress = src
	}
	switch {
	case s.PeerPort == nil:
		peer.Port = DefaultPeerPort
	case *s.PeerPort < 1 || *s.PeerPort > 65535:
		r.errorf("spec.peerPort", "%d is out of range: must be between 1 and 65535", *s.PeerPort)
	default:
		peer.Port = uint16(*s.PeerPort)
	}

	peer.HoldTime = DefaultHoldTime
	if s.HoldTime != nil {
		peer.HoldTime = s.HoldTime.Duration
		switch h := peer.HoldTime; {
		case h%time.Second != 0:
			r.errorf("spec.holdTime", "%s is not a whole number of seconds; BGP carries the hold time in seconds", h)
		case h == 0:
			// BGP allows 0 (no keepalives), but GoBGP reads 0 as unset and
			// would propose 90s: refuse it rather than run something else.
			r.errorf("spec.holdTime", "0s (no keepalives) is not supported by herald's BGP speaker (GoBGP): use between 3s and 65535s")
		case h < 3*time.Second || h > 65535*time.Second:
			r.errorf("spec.holdTime", "%s is not allowed: use between 3s and 65535s", h)
		}
	}
	peer.KeepaliveTime = (peer.HoldTime / 3).Truncate(time.Second)
	if s.KeepaliveTime != nil {
		peer.KeepaliveTime = s.KeepaliveTime.Duration
		switch k := peer.KeepaliveTime; {
		case k%time.Second != 0:
			r.errorf("spec.keepaliveTime", "%s is not a whole number of seconds", k)
		case k < 0:
			r.errorf("spec.keepaliveTime", "%s is negative", k)
		case k > peer.HoldTime:
			r.errorf("spec.keepaliveTime", "%s is longer than holdTime %s: keepalives must come before the hold timer expires", k, peer.HoldTime)
		}
	}
	if s.ConnectTime != nil {
		peer.ConnectTime = s.ConnectTime.Duration
		if c := peer.ConnectTime; c < time.Second || c > 65535*time.Second {
			r.errorf("spec.connectTime", "%s is out of range: must be between 1s and 65535s", c)
		}
	}
	if s.RouterID != "" {
		id, err := parseIP(s.RouterID)
		if err == nil && !id.Is4() {
			err = fmt.Errorf("%s is not an IPv4 address; a BGP router ID is written as one", id)
		}
		if err != nil {
			r.errorf("spec.routerID", "%v", err)
		}
		peer.RouterID = id
	}
	if s.EBGPMultiHop && !peer.External() && (s.PeerASN != 0 || s.DynamicASN != "") {
		r.errorf("spec.ebgpMultiHop", "applies to eBGP sessions only; this peer is in the same AS as myASN (%d)", s.MyASN)
	}
	peer.NodeSelectors = parseSelectors(r, "spec.nodeSelectors", s.NodeSelectors)
	p.peerPassword(r, o, peer)
	if s.BFDProfile != "" {
		if prof, ok := p.cfg.BFDProfiles[s.BFDProfile]; ok {
			peer.BFD = prof
		} else if p.isBroken(KindBFDProfile, o.Namespace, s.BFDProfile) {
			r.errorf("spec.bfdProfile", "BFDProfile %s has problems and is not in use", s.BFDProfile)
		} else {
			r.errorf("spec.bfdProfile", "BFDProfile %s does not exist", s.BFDProfile)
		}
	}
	if r.ok() {
		p.peerConflicts(r, o, peer)
	}
	if !r.ok() {
		p.brokenPeers[o.Name] = true
		return
	}
	delete(p.brokenPeers, o.Name)
	p.cfg.Peers[o.Name] = peer
}

func (p *parser) peerPassword(r *reporter, o *v1beta1.BGPPeer, peer *Peer) {
	s := o.Spec
	if len(s.Password) > 80 {
		r.errorf("spec.password", "is %d bytes long; TCP MD5 keys are at most 80", len(s.Password))
	}
	if s.PasswordSecret == nil {
		peer.Password = Secret(s.Password)
		return
	}
	if s.Password != "" {
		r.errorf("spec.passwordSecret", "password and passwordSecret are mutually exclusive: set one")
		return
	}
	ref := s.PasswordSecret
	key := ref.Key
	if key == "" {
		key = "password"
	}
	if ref.Name == "" {
		r.errorf("spec.passwordSecret.name", "must name a Secret")
		return
	}
	peer.PasswordSecret = ref.Name
	stored, haveStored := p.in.Passwords[o.Name]
	if p.in.PasswordsFromCopy {
		if !haveStored {
			r.errorf("spec.passwordSecret", "the password from Secret %s has not been copied by the controller yet", ref.Name)
		}
		peer.Password = stored
		return
	}
	if p.in.SecretsUnavailable {
		return
	}
	if p.fallback && haveStored {
		// The version in force keeps its password while the Secret it
		// names is missing or broken; a good Secret still wins below.
		peer.Password = stored
		r = &reporter{kind: r.kind, namespace: r.namespace, name: r.name, out: new(Problems)}
	}
	data, ok := p.secrets[o.Namespace+"/"+ref.Name]
	if !ok && p.in.Namespace != "" {
		// Objects written without a namespace count as in herald's own.
		if o.Namespace == "" {
			data, ok = p.secrets[p.in.Namespace+"/"+ref.Name]
		} else {
			data, ok = p.secrets["/"+ref.Name]
		}
	}
	switch {
	case !ok:
		r.errorf("spec.passwordSecret.name", "Secret %s does not exist in this namespace", ref.Name)
	case len(data[key]) == 0:
		r.errorf("spec.passwordSecret.key", "Secret %s has no key %q (or it is empty)", ref.Name, key)
	case len(data[key]) > 80:
		r.errorf("spec.passwordSecret", "the password in Secret %s is %d bytes long; TCP MD5 keys are at most 80", ref.Name, len(data[key]))
	default:
		peer.Password = Secret(data[key])
	}
}

// peerConflicts refuses a peer when an older one talks to the same address
// from nodes they may share: a node can hold one session per peer address.
// Without the node list, selectors are taken to overlap when either selects
// every node or both contain the same selector.
func (p *parser) peerConflicts(r *reporter, o *v1beta1.BGPPeer, peer *Peer) {
	mine := selectorKeys(peer.NodeSelectors)
	for _, prev := range p.acceptedPeers {
		if prev.peer.Address != peer.Address {
			continue
		}
		if !selectorsMayOverlap(mine, prev.selectors, peer.NodeSelectors.AllowAll(), prev.peer.NodeSelectors.AllowAll()) {
			continue
		}
		r.errorf("spec.peerAddress", "BGPPeer %s already peers with %s from the same nodes; a node holds one session per peer address, so give the two peers disjoint nodeSelectors or merge them", prev.peer.Name, peer.Address)
		return
	}
	p.acceptedPeers = append(p.acceptedPeers, &peerEntry{peer: peer, selectors: mine})
}

func selectorKeys(ss Selectors) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.String()
	}
	return out
}

func selectorsMayOverlap(a, b []string, aAll, bAll bool) bool {
	if aAll || bAll {
		return true
	}
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// isBroken reports whether an object of the kind exists but was left out.
func (p *parser) isBroken(kind, namespace, name string) bool {
	switch kind {
	case KindIPAddressPool:
		return p.brokenPools[name]
	case KindBGPPeer:
		return p.brokenPeers[name]
	}
	return len(p.problems.For(kind, namespace, name)) > 0
}

// --- advertisements -------------------------------------------------------

// resolvePools turns pool names and selectors into the sorted names of valid
// pools. With neither given, an advertisement covers every pool. Names of
// missing pools are warnings while at least one pool resolves, else errors.
func (p *parser) resolvePools(r *reporter, names []v1beta1.ObjectName, sels []metav1.LabelSelector) []string {
	if len(names) == 0 && len(sels) == 0 {
		return p.cfg.PoolNames()
	}
	set := map[string]bool{}
	type miss struct{ field, msg string }
	var misses []miss
	for i, n := range names {
		field := indexed("spec.ipAddressPools", i)
		switch {
		case p.cfg.Pools[string(n)] != nil:
			set[string(n)] = true
		case p.brokenPools[string(n)]:
			misses = append(misses, miss{field, fmt.Sprintf("IPAddressPool %s has problems and is not in use", n)})
		default:
			misses = append(misses, miss{field, fmt.Sprintf("IPAddressPool %s does not exist", n)})
		}
	}
	selectors := parseSelectors(r, "spec.ipAddressPoolSelectors", sels)
	for i, s := range selectors {
		matched := false
		for _, name := range p.cfg.PoolNames() {
			if s.Matches(p.cfg.Pools[name].Labels) {
				set[name], matched = true, true
			}
		}
		if !matched {
			misses = append(misses, miss{indexed("spec.ipAddressPoolSelectors", i), fmt.Sprintf("selector %q matches no valid IPAddressPool", s)})
		}
	}
	for _, m := range misses {
		if len(set) == 0 {
			r.errorf(m.field, "%s, so this advertisement announces nothing", m.msg)
		} else {
			r.warnf(m.field, "%s", m.msg)
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (p *parser) l2Advertisement(o *v1beta1.L2Advertisement, r *reporter) {
	s := o.Spec
	adv := &L2Advertisement{Name: o.Name}
	adv.Pools = p.resolvePools(r, s.IPAddressPools, s.IPAddressPoolSelectors)
	adv.NodeSelectors = parseSelectors(r, "spec.nodeSelectors", s.NodeSelectors)
	adv.ServiceSelectors = parseSelectors(r, "spec.serviceSelectors", s.ServiceSelectors)
	for i, ifc := range s.Interfaces {
		if msg := checkInterfaceName(string(ifc)); msg != "" {
			r.errorf(indexed("spec.interfaces", i), "%q %s", ifc, msg)
			continue
		}
		adv.Interfaces = append(adv.Interfaces, string(ifc))
	}
	if r.ok() {
		p.cfg.L2Advertisements = append(p.cfg.L2Advertisements, adv)
	}
}

func checkInterfaceName(n string) string {
	switch {
	case n == "":
		return "is empty"
	case len(n) > 15:
		return "is longer than 15 bytes, the Linux limit for interface names"
	case n == "." || n == "..":
		return "is not a valid interface name"
	case strings.ContainsAny(n, "/: \t\n\r\v\f"):
		return "is not a valid interface name: it may not contain '/', ':' or whitespace"
	}
	return ""
}

func (p *parser) bgpAdvertisement(o *v1beta1.BGPAdvertisement, r *reporter) {
	s := o.Spec
	adv := &BGPAdvertisement{Name: o.Name, AggregationLength: DefaultAggregationV4, AggregationLengthV6: DefaultAggregationV6, LocalPref: s.LocalPref}
	if s.AggregationLength != nil {
		adv.AggregationLength = int(*s.AggregationLength)
		if adv.AggregationLength < 0 || adv.AggregationLength > 32 {
			r.errorf("spec.aggregationLength", "%d is out of range for IPv4: must be between 0 and 32", adv.AggregationLength)
		}
	}
	if s.AggregationLengthV6 != nil {
		adv.AggregationLengthV6 = int(*s.AggregationLengthV6)
		if adv.AggregationLengthV6 < 0 || adv.AggregationLengthV6 > 128 {
			r.errorf("spec.aggregationLengthV6", "%d is out of range for IPv6: must be between 0 and 128", adv.AggregationLengthV6)
		}
	}
	adv.Pools = p.resolvePools(r, s.IPAddressPools, s.IPAddressPoolSelectors)
	if r.ok() {
		p.checkAggregation(r, adv)
	}
	for i, c := range s.Communities {
		v, err := resolveCommunity(string(c), p.aliases)
		if err != nil {
			r.errorf(indexed("spec.communities", i), "%v", err)
			continue
		}
		adv.Communities = append(adv.Communities, v)
	}
	adv.Peers = p.resolvePeers(r, s.Peers)
	if s.LocalPref != nil {
		p.checkLocalPref(r, adv)
	}
	adv.NodeSelectors = parseSelectors(r, "spec.nodeSelectors", s.NodeSelectors)
	adv.ServiceSelectors = parseSelectors(r, "spec.serviceSelectors", s.ServiceSelectors)
	if r.ok() {
		p.cfg.BGPAdvertisements = append(p.cfg.BGPAdvertisements, adv)
	}
}

// checkAggregation refuses an aggregation length shorter than a CIDR the
// pool covers: the aggregate would draw traffic for addresses outside the
// pool towards the nodes.
func (p *parser) checkAggregation(r *reporter, adv *BGPAdvertisement) {
	for _, name := range adv.Pools {
		for _, rg := range p.cfg.Pools[name].Ranges {
			field, agg := "spec.aggregationLength", adv.AggregationLength
			if rg.Is6() {
				field, agg = "spec.aggregationLengthV6", adv.AggregationLengthV6
			}
			for _, pfx := range rg.Prefixes() {
				if pfx.Bits() > agg {
					r.errorf(field, "/%d is shorter than %s in IPAddressPool %s: the aggregate route would cover addresses outside the pool", agg, pfx, name)
					return
				}
			}
		}
	}
}

func (p *parser) resolvePeers(r *reporter, names []v1beta1.ObjectName) []string {
	var out []string
	var errs []string
	for i, n := range names {
		field := indexed("spec.peers", i)
		switch {
		case p.cfg.Peers[string(n)] != nil:
			out = append(out, string(n))
		case p.brokenPeers[string(n)]:
			errs = append(errs, field, fmt.Sprintf("BGPPeer %s has problems and is not in use", n))
		default:
			errs = append(errs, field, fmt.Sprintf("BGPPeer %s does not exist", n))
		}
	}
	for i := 0; i < len(errs); i += 2 {
		if len(out) == 0 {
			r.errorf(errs[i], "%s, so this advertisement reaches no peer", errs[i+1])
		} else {
			r.warnf(errs[i], "%s", errs[i+1])
		}
	}
	sort.Strings(out)
	return out
}

// checkLocalPref warns when every peer the advertisement reaches is eBGP:
// LOCAL_PREF is never sent across AS boundaries, so the field does nothing.
func (p *parser) checkLocalPref(r *reporter, adv *BGPAdvertisement) {
	names := adv.Peers
	if len(names) == 0 {
		for n := range p.cfg.Peers {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	if len(names) == 0 {
		return
	}
	for _, n := range names {
		if !p.cfg.Peers[n].External() {
			return
		}
	}
	r.warnf("spec.localPref", "is only sent to iBGP peers, and every peer this advertisement reaches (%s) is eBGP, so it has no effect", strings.Join(names, ", "))
}
