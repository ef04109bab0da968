package allocator

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// Allocator assigns IPs from pools to Services. It is safe for concurrent
// use; every method holds one lock, and none does I/O.
type Allocator struct {
	mu     sync.Mutex
	pools  map[string]*poolState
	order  []*poolState // every pool in automatic-assignment order
	index4 []indexEntry // every range, sorted, for address → pool
	index6 []indexEntry

	held map[Key]*holding
	ips  map[netip.Addr]*ipState
	// groups maps a sharing key to the IPs held under it, so a Service
	// finds the IPs it may share without scanning a pool.
	groups map[string]map[netip.Addr]struct{}
}

// holding is what one Service holds, with the request it was made for.
type holding struct {
	svc  Service // normalized copy
	pool string
	ips  []netip.Addr // in the order of svc.Families
}

// ipState is one address in use and the Services holding it. All holders
// agree on sharing key and backend; their ports are disjoint.
type ipState struct {
	pool    string
	sharing string
	backend string
	holders map[Key]struct{}
	ports   map[Port]Key
}

// New returns an allocator with no pools.
func New() *Allocator {
	return &Allocator{
		pools:  map[string]*poolState{},
		held:   map[Key]*holding{},
		ips:    map[netip.Addr]*ipState{},
		groups: map[string]map[netip.Addr]struct{}{},
	}
}

func (h *holding) assignment() Assignment {
	return Assignment{Pool: h.pool, IPs: slices.Clone(h.ips)}
}

// Lookup returns what a Service holds.
func (a *Allocator) Lookup(k Key) (Assignment, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.held[k]
	if h == nil {
		return Assignment{}, false
	}
	return h.assignment(), true
}

// Holders returns the Services holding ip, sorted.
func (a *Allocator) Holders(ip netip.Addr) []Key {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.ips[ip]
	if st == nil {
		return nil
	}
	out := slices.Collect(maps.Keys(st.holders))
	slices.SortFunc(out, Key.Compare)
	return out
}

// Release frees what the Service holds and returns it. An IP shared with
// other Services stays theirs.
func (a *Allocator) Release(k Key) (Assignment, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.held[k]
	if h == nil {
		return Assignment{}, false
	}
	a.release(h)
	return h.assignment(), true
}

// Assign gives the Service IPs by the rules in the package documentation,
// or confirms the ones it holds. A Service keeps what it holds while that
// still satisfies its request; otherwise the request is evaluated again,
// preferring the IPs and pool it had. On failure the error is an *Error and
// the returned Assignment is what the Service still holds: its previous IPs
// when they are still valid in their pool (a changed request that cannot be
// met does not take working IPs away), else nothing.
func (a *Allocator) Assign(in Service) (Assignment, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	svc := snapshot(in)
	wanted, err := svc.check()
	if err != nil {
		if h := a.held[svc.Key()]; h != nil {
			if a.valid(h, &svc) {
				return h.assignment(), err
			}
			a.release(h)
		}
		return Assignment{}, err
	}
	h := a.held[svc.Key()]
	if h == nil {
		return a.allocate(&svc, wanted, nil)
	}
	valid := a.valid(h, &svc)
	if valid && a.satisfies(h, &svc, wanted) && a.compatible(h, &svc) {
		a.refresh(h, svc)
		if svc.FamilyPolicy == PreferDualStack && len(svc.RequestedIPs) == 0 && len(h.ips) < len(wanted) {
			h = a.upgrade(h, wanted)
		}
		return h.assignment(), nil
	}
	// Release first so the Service's own IPs count as free to it, then
	// put them back as they were if nothing better is found.
	a.release(h)
	got, aerr := a.allocate(&svc, wanted, h)
	if aerr != nil && valid {
		a.commit(&h.svc, h.pool, h.ips)
		return h.assignment(), aerr
	}
	return got, aerr
}

// Adopt records IPs a Service already has (from its status, when the
// controller starts), without checking them against its request; a later
// Assign does that, and moves them only if it must. The IPs must be in one
// pool and free, or held by Services the Service may share with; otherwise
// the error names what is in the way and nothing is recorded. Adopting
// Services in a stable order (oldest first) makes the outcome of a conflict
// repeatable.
func (a *Allocator) Adopt(in Service, ips []netip.Addr) (Assignment, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	svc := snapshot(in)
	key := svc.Key()
	if len(ips) == 0 || len(ips) > 2 {
		return Assignment{}, errorf(ReasonInvalidRequest, "adopt needs one or two IPs, got %d", len(ips))
	}
	ips = slices.Clone(ips)
	for i, ip := range ips {
		if !ip.IsValid() || ip.Zone() != "" {
			return Assignment{}, errorf(ReasonInvalidRequest, "%q is not a plain IP address", ip)
		}
		ips[i] = ip.Unmap()
	}
	if len(ips) == 2 && FamilyOf(ips[0]) == FamilyOf(ips[1]) {
		return Assignment{}, errorf(ReasonInvalidRequest, "%s and %s are of one family", ips[0], ips[1])
	}
	sortByFamilies(ips, svc.Families)

	old := a.held[key]
	if old != nil {
		a.release(old)
	}
	fail := func(e *Error) (Assignment, error) {
		if old != nil {
			a.commit(&old.svc, old.pool, old.ips)
		}
		return Assignment{}, e
	}
	var pool *poolState
	for _, ip := range ips {
		p, e := a.requestedPool(ip, "")
		if e != nil {
			return fail(e)
		}
		if pool != nil && p != pool {
			return fail(&Error{Reason: ReasonInvalidRequest, IP: ip, Message: fmt.Sprintf("%s is in pool %s but %s is in pool %s: one Service's IPs come from one pool", ips[0], pool.name(), ip, p.name())})
		}
		pool = p
		if st := a.ips[ip]; st != nil {
			if e := compat(st, ip, &svc); e != nil {
				return fail(e)
			}
		}
	}
	a.commit(&svc, pool.name(), ips)
	return a.held[key].assignment(), nil
}

// snapshot copies what the allocator keeps of a Service, normalized.
func snapshot(in Service) Service {
	svc := in
	svc.NamespaceLabels = maps.Clone(in.NamespaceLabels)
	svc.Labels = maps.Clone(in.Labels)
	svc.Ports = normPorts(in.Ports)
	var fams []Family
	for _, f := range in.Families {
		if !slices.Contains(fams, f) {
			fams = append(fams, f)
		}
	}
	if len(fams) == 0 {
		fams = []Family{IPv4}
	}
	svc.Families = fams
	svc.RequestedIPs = slices.Clone(in.RequestedIPs)
	for i, ip := range svc.RequestedIPs {
		svc.RequestedIPs[i] = ip.Unmap()
	}
	sortByFamilies(svc.RequestedIPs, fams)
	return svc
}

// check validates the request and returns the families wanted, in order.
func (svc *Service) check() ([]Family, *Error) {
	for _, f := range svc.Families {
		if f != IPv4 && f != IPv6 {
			return nil, errorf(ReasonInvalidRequest, "unknown IP family %v", f)
		}
	}
	var wanted []Family
	switch svc.FamilyPolicy {
	case SingleStack:
		wanted = svc.Families[:1]
	case PreferDualStack:
		wanted = svc.Families
	case RequireDualStack:
		if len(svc.Families) < 2 {
			return nil, errorf(ReasonInvalidRequest, "RequireDualStack needs both IP families in ipFamilies")
		}
		wanted = svc.Families
	default:
		return nil, errorf(ReasonInvalidRequest, "unknown ipFamilyPolicy %v", svc.FamilyPolicy)
	}
	var seen []Family
	for _, ip := range svc.RequestedIPs {
		if !ip.IsValid() || ip.Zone() != "" {
			return nil, errorf(ReasonInvalidRequest, "requested IP %q is not a plain IP address", ip)
		}
		f := FamilyOf(ip)
		if slices.Contains(seen, f) {
			return nil, errorf(ReasonInvalidRequest, "more than one %s address requested; ask for at most one per family", f)
		}
		seen = append(seen, f)
		if !slices.Contains(wanted, f) {
			return nil, errorf(ReasonInvalidRequest, "requested IP %s is %s, but the Service (%s, families %v) takes only %v", ip, f, svc.FamilyPolicy, svc.Families, wanted)
		}
	}
	if svc.FamilyPolicy == RequireDualStack && len(seen) == 1 {
		return nil, errorf(ReasonInvalidRequest, "RequireDualStack with requested IPs needs one IP of each family")
	}
	return wanted, nil
}

// sortByFamilies orders ips as the families list does (unknown last).
func sortByFamilies(ips []netip.Addr, fams []Family) {
	rank := func(ip netip.Addr) int {
		if i := slices.Index(fams, FamilyOf(ip)); i >= 0 {
			return i
		}
		return len(fams)
	}
	slices.SortStableFunc(ips, func(x, y netip.Addr) int { return rank(x) - rank(y) })
}

// valid reports whether the holding may stay: its pool exists, holds every
// IP and admits the Service.
func (a *Allocator) valid(h *holding, svc *Service) bool {
	p := a.pools[h.pool]
	if p == nil || !p.allows(svc) {
		return false
	}
	for _, ip := range h.ips {
		if a.poolOf(ip) != p {
			return false
		}
	}
	return true
}

// satisfies reports whether the holding answers the request: the requested
// IPs exactly, the requested pool, the families of the policy. Priorities
// and autoAssign are not checked: a better pool appearing, or autoAssign
// turned off, moves nobody.
func (a *Allocator) satisfies(h *holding, svc *Service, wanted []Family) bool {
	if len(svc.RequestedIPs) > 0 && !sameSet(h.ips, svc.RequestedIPs) {
		return false
	}
	if svc.Pool != "" && h.pool != svc.Pool {
		return false
	}
	for _, ip := range h.ips {
		if !slices.Contains(wanted, FamilyOf(ip)) {
			return false
		}
	}
	switch svc.FamilyPolicy {
	case SingleStack, RequireDualStack:
		return len(h.ips) == len(wanted)
	}
	return len(h.ips) > 0
}

func sameSet(a, b []netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// compatible reports whether the Service, as it is now, may go on sharing
// its IPs with their other holders.
func (a *Allocator) compatible(h *holding, svc *Service) bool {
	for _, ip := range h.ips {
		if compat(a.ips[ip], ip, svc) != nil {
			return false
		}
	}
	return true
}

// compat checks whether svc may hold ip alongside its current holders
// (other than svc itself). The error names the lowest-keyed holder in the
// way, so messages are repeatable.
func compat(st *ipState, ip netip.Addr, svc *Service) *Error {
	self := svc.Key()
	var other Key
	found := false
	for k := range st.holders {
		if k != self && (!found || k.Compare(other) < 0) {
			other, found = k, true
		}
	}
	if !found {
		return nil
	}
	e := &Error{Other: other, Pool: st.pool, IP: ip}
	switch {
	case svc.SharingKey == "":
		e.Reason = ReasonIPInUse
		e.Message = fmt.Sprintf("%s is in use by %s (set the herald.io/allow-shared-ip annotation on both Services to share it)", ip, other)
	case st.sharing == "":
		e.Reason = ReasonIPInUse
		e.Message = fmt.Sprintf("%s is in use by %s, which does not allow sharing", ip, other)
	case st.sharing != svc.SharingKey:
		e.Reason = ReasonIPInUse
		e.Message = fmt.Sprintf("%s is in use by %s with sharing key %q, not %q", ip, other, st.sharing, svc.SharingKey)
	case st.backend != svc.backendKey():
		e.Reason = ReasonSharingConflict
		e.Message = fmt.Sprintf("sharing conflict with %s on %s: Services sharing an IP must all use externalTrafficPolicy Cluster, or all Local and select the same pods", other, ip)
	default:
		for _, p := range svc.Ports {
			if k, ok := st.ports[p]; ok && k != self {
				e.Reason = ReasonSharingConflict
				e.Other = k
				e.Message = fmt.Sprintf("sharing conflict with %s on %s: port %s is used by both", k, ip, p)
				return e
			}
		}
		return nil
	}
	return e
}

// refresh records the Service's current ports and sharing key on the IPs
// it keeps (compatible has checked them).
func (a *Allocator) refresh(h *holding, svc Service) {
	key := svc.Key()
	for _, ip := range h.ips {
		st := a.ips[ip]
		for _, p := range h.svc.Ports {
			if st.ports[p] == key {
				delete(st.ports, p)
			}
		}
		for _, p := range svc.Ports {
			st.ports[p] = key
		}
		if len(st.holders) == 1 {
			a.setSharing(ip, st, svc.SharingKey)
			st.backend = svc.backendKey()
		}
	}
	h.svc = svc
}

func (a *Allocator) setSharing(ip netip.Addr, st *ipState, sk string) {
	if st.sharing == sk {
		return
	}
	if g := a.groups[st.sharing]; g != nil {
		delete(g, ip)
		if len(g) == 0 {
			delete(a.groups, st.sharing)
		}
	}
	st.sharing = sk
	if sk != "" {
		if a.groups[sk] == nil {
			a.groups[sk] = map[netip.Addr]struct{}{}
		}
		a.groups[sk][ip] = struct{}{}
	}
}

// upgrade adds, for a PreferDualStack Service holding fewer families than
// it wants, the missing family from its pool if there is one free now. The
// IPs it has stay. It returns the holding now recorded.
func (a *Allocator) upgrade(h *holding, wanted []Family) *holding {
	p := a.pools[h.pool]
	var add []netip.Addr
	for _, f := range wanted {
		if slices.ContainsFunc(h.ips, func(ip netip.Addr) bool { return FamilyOf(ip) == f }) || !p.has[famIdx(f)] {
			continue
		}
		if ip, ok := a.pick(p, f, &h.svc, nil); ok {
			add = append(add, ip)
		}
	}
	if len(add) > 0 {
		ips := append(slices.Clone(h.ips), add...)
		sortByFamilies(ips, h.svc.Families)
		a.release(h)
		a.commit(&h.svc, h.pool, ips)
	}
	return a.held[h.svc.Key()]
}

// allocate makes a new holding by the rules; old is the Service's previous
// holding (already released), whose IPs and pool are preferred.
func (a *Allocator) allocate(svc *Service, wanted []Family, old *holding) (Assignment, error) {
	key := svc.Key()
	var own []netip.Addr
	if old != nil {
		own = old.ips
	}
	if svc.Pool != "" && a.pools[svc.Pool] == nil {
		return Assignment{}, &Error{Reason: ReasonPoolNotFound, Pool: svc.Pool, Message: fmt.Sprintf("requested pool %s does not exist", svc.Pool)}
	}
	if len(svc.RequestedIPs) > 0 {
		return a.allocateRequested(svc)
	}
	if svc.Pool != "" {
		p := a.pools[svc.Pool]
		if !p.allows(svc) {
			return Assignment{}, &Error{Reason: ReasonPoolNotAllowed, Pool: p.name(), Message: fmt.Sprintf("pool %s does not serve this Service (its serviceAllocation restricts it to other namespaces or Services)", p.name())}
		}
		ips, e := a.tryPool(p, svc, wanted, own)
		if e != nil {
			return Assignment{}, e
		}
		a.commit(svc, p.name(), ips)
		return a.held[key].assignment(), nil
	}

	// Candidates: the previous pool if it still admits the Service (even
	// with autoAssign off: staying is not a new automatic choice), then
	// pools where the sharing group holds an IP the Service may share,
	// then the rest, each part in automatic-assignment order.
	var first, sharing, rest []*poolState
	if old != nil {
		if p := a.pools[old.pool]; p != nil && p.allows(svc) {
			first = append(first, p)
		}
	}
	for _, p := range a.order {
		if !p.cfg.AutoAssign || !p.allows(svc) || slices.Contains(first, p) {
			continue
		}
		if a.hasShareable(p, svc, wanted) {
			sharing = append(sharing, p)
		} else {
			rest = append(rest, p)
		}
	}
	cands := slices.Concat(first, sharing, rest)
	if len(cands) == 0 {
		return Assignment{}, errorf(ReasonNoPoolMatches, "no IPAddressPool assigns addresses to this Service automatically (autoAssign and serviceAllocation leave none); request a pool or an IP")
	}
	var errs []*Error
	for _, p := range cands {
		ips, e := a.tryPool(p, svc, wanted, own)
		if e == nil {
			a.commit(svc, p.name(), ips)
			return a.held[key].assignment(), nil
		}
		errs = append(errs, e)
	}
	if len(errs) == 1 {
		return Assignment{}, errs[0]
	}
	out := &Error{Reason: ReasonFamilyUnavailable}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		if e.Reason == ReasonPoolExhausted && out.Reason != ReasonPoolExhausted {
			out.Reason, out.Pool = ReasonPoolExhausted, e.Pool
		}
		msgs[i] = e.Message
	}
	out.Message = fmt.Sprintf("no pool can serve this Service: %s", strings.Join(msgs, "; "))
	return Assignment{}, out
}

// allocateRequested assigns exactly the requested IPs.
func (a *Allocator) allocateRequested(svc *Service) (Assignment, error) {
	key := svc.Key()
	var pool *poolState
	for _, ip := range svc.RequestedIPs {
		p, e := a.requestedPool(ip, svc.Pool)
		if e != nil {
			return Assignment{}, e
		}
		if pool != nil && p != pool {
			return Assignment{}, &Error{Reason: ReasonInvalidRequest, IP: ip, Message: fmt.Sprintf("requested IPs %s (pool %s) and %s (pool %s) are in different pools; a Service's IPs come from one pool", svc.RequestedIPs[0], pool.name(), ip, p.name())}
		}
		pool = p
	}
	if !pool.allows(svc) {
		return Assignment{}, &Error{Reason: ReasonPoolNotAllowed, Pool: pool.name(), Message: fmt.Sprintf("requested IP %s is in pool %s, which does not serve this Service (its serviceAllocation restricts it to other namespaces or Services)", svc.RequestedIPs[0], pool.name())}
	}
	for _, ip := range svc.RequestedIPs {
		if st := a.ips[ip]; st != nil {
			if e := compat(st, ip, svc); e != nil {
				e.Message = fmt.Sprintf("requested IP %s", e.Message)
				return Assignment{}, e
			}
		}
	}
	a.commit(svc, pool.name(), svc.RequestedIPs)
	return a.held[key].assignment(), nil
}

// requestedPool returns the pool of an IP asked for by address; want, when
// set, is the pool it must be in.
func (a *Allocator) requestedPool(ip netip.Addr, want string) (*poolState, *Error) {
	e, ok := a.lookup(ip)
	if !ok {
		return nil, &Error{Reason: ReasonIPNotInPool, IP: ip, Message: fmt.Sprintf("%s is not in any IPAddressPool", ip)}
	}
	if !e.r.free.usable(addrToU128(ip)) {
		return nil, &Error{Reason: ReasonIPNotInPool, IP: ip, Pool: e.pool.name(), Message: fmt.Sprintf("%s is in pool %s, which does not hand out addresses ending in .0 or .255 (avoidBuggyIPs)", ip, e.pool.name())}
	}
	if want != "" && e.pool.name() != want {
		return nil, &Error{Reason: ReasonIPNotInPool, IP: ip, Pool: want, Message: fmt.Sprintf("%s is not in the requested pool %s (it is in pool %s)", ip, want, e.pool.name())}
	}
	return e.pool, nil
}

// hasShareable reports whether the pool holds an IP of a wanted family that
// the Service's sharing group uses and the Service may share.
func (a *Allocator) hasShareable(p *poolState, svc *Service, wanted []Family) bool {
	if svc.SharingKey == "" {
		return false
	}
	for ip := range a.groups[svc.SharingKey] {
		st := a.ips[ip]
		if st.pool == p.name() && slices.Contains(wanted, FamilyOf(ip)) && compat(st, ip, svc) == nil {
			return true
		}
	}
	return false
}

// tryPool picks one IP per wanted family from the pool, by the policy.
func (a *Allocator) tryPool(p *poolState, svc *Service, wanted []Family, own []netip.Addr) ([]netip.Addr, *Error) {
	var got []netip.Addr
	var missing, exhausted []string
	for _, f := range wanted {
		if !p.has[famIdx(f)] {
			missing = append(missing, f.String())
			continue
		}
		ip, ok := a.pick(p, f, svc, own)
		if !ok {
			exhausted = append(exhausted, f.String())
			continue
		}
		got = append(got, ip)
	}
	ex := &Error{Reason: ReasonPoolExhausted, Pool: p.name(), Message: fmt.Sprintf("pool %s has no free %s address", p.name(), strings.Join(exhausted, " or "))}
	fu := &Error{Reason: ReasonFamilyUnavailable, Pool: p.name(), Message: fmt.Sprintf("pool %s has no %s addresses", p.name(), strings.Join(missing, " or "))}
	if svc.FamilyPolicy == PreferDualStack {
		switch {
		case len(got) > 0:
			return got, nil
		case len(exhausted) > 0:
			return nil, ex
		}
		return nil, fu
	}
	switch {
	case len(missing) > 0:
		if svc.FamilyPolicy == RequireDualStack {
			fu.Message += " (RequireDualStack needs one of each family from one pool)"
		}
		return nil, fu
	case len(exhausted) > 0:
		return nil, ex
	}
	return got, nil
}

// pick chooses the Service's IP of one family in a pool: its own previous
// IP, else the lowest IP its sharing group holds there that it may share,
// else the lowest free address.
func (a *Allocator) pick(p *poolState, f Family, svc *Service, own []netip.Addr) (netip.Addr, bool) {
	for _, ip := range own {
		if FamilyOf(ip) != f || a.poolOf(ip) != p {
			continue
		}
		if st := a.ips[ip]; st == nil || compat(st, ip, svc) == nil {
			return ip, true
		}
	}
	if svc.SharingKey != "" {
		var best netip.Addr
		for ip := range a.groups[svc.SharingKey] {
			st := a.ips[ip]
			if st.pool != p.name() || FamilyOf(ip) != f || (best.IsValid() && !ip.Less(best)) {
				continue
			}
			if compat(st, ip, svc) == nil {
				best = ip
			}
		}
		if best.IsValid() {
			return best, true
		}
	}
	return p.lowestFree(f)
}

// commit records the holding; free IPs among ips are taken from the pool.
func (a *Allocator) commit(svc *Service, pool string, ips []netip.Addr) {
	key := svc.Key()
	ips = slices.Clone(ips)
	sortByFamilies(ips, svc.Families)
	for _, ip := range ips {
		st := a.ips[ip]
		if st == nil {
			e, _ := a.lookup(ip)
			e.r.free.take(addrToU128(ip))
			e.pool.inUse[famIdx(FamilyOf(ip))]++
			st = &ipState{pool: pool, backend: svc.backendKey(), holders: map[Key]struct{}{}, ports: map[Port]Key{}}
			a.ips[ip] = st
			a.setSharing(ip, st, svc.SharingKey)
		}
		st.holders[key] = struct{}{}
		for _, p := range svc.Ports {
			st.ports[p] = key
		}
	}
	a.held[key] = &holding{svc: *svc, pool: pool, ips: ips}
}

// release drops the holding; IPs left with no holder return to their pool.
func (a *Allocator) release(h *holding) {
	key := h.svc.Key()
	for _, ip := range h.ips {
		st := a.ips[ip]
		delete(st.holders, key)
		for _, p := range h.svc.Ports {
			if st.ports[p] == key {
				delete(st.ports, p)
			}
		}
		if len(st.holders) > 0 {
			continue
		}
		a.setSharing(ip, st, "")
		delete(a.ips, ip)
		if p := a.pools[st.pool]; p != nil {
			if e, ok := a.lookup(ip); ok && e.pool == p {
				e.r.free.put(addrToU128(ip))
			}
			p.inUse[famIdx(FamilyOf(ip))]--
		}
	}
	delete(a.held, key)
}
