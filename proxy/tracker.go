package proxy

import (
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/herald-lb/herald/proxy/rules"
)

// TaintToBeDeleted is the cluster autoscaler's taint on a node it is
// about to remove; kube-proxy's /healthz fails on such a node so load
// balancers drain it first.
const TaintToBeDeleted = "ToBeDeletedByClusterAutoscaler"

// NodeInfo is what the proxy takes from its Node object.
type NodeInfo struct {
	Name string
	// IPs are the InternalIP and ExternalIP addresses.
	IPs []netip.Addr
	// PrimaryIPs are the node's primary IP of each family, as kubelet
	// and kube-proxy pick them: the first InternalIP of the family, else
	// its first ExternalIP (--nodeport-addresses=primary).
	PrimaryIPs []netip.Addr
	// PodCIDRs is spec.podCIDRs, the fallback for "from a pod on this
	// node" when --cluster-cidr is not set.
	PodCIDRs []netip.Prefix
	// Zone is the topology.kubernetes.io/zone label ("" without one),
	// which endpoints' zone hints are read against.
	Zone string
	// Eligible is false while the node is being deleted or drained.
	Eligible bool
	// Seen is true once the Node object was read.
	Seen bool
}

// nodeInfoFrom reduces a Node; unparseable addresses are skipped (the
// API server validates them, so there is nothing to report).
func nodeInfoFrom(n *corev1.Node) NodeInfo {
	info := NodeInfo{Name: n.Name, Seen: true, Eligible: n.DeletionTimestamp == nil, Zone: n.Labels[corev1.LabelTopologyZone]}
	for _, t := range n.Spec.Taints {
		if t.Key == TaintToBeDeleted {
			info.Eligible = false
		}
	}
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && !slices.Contains(info.IPs, ip.Unmap()) {
			info.IPs = append(info.IPs, ip.Unmap())
		}
	}
	for _, typ := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if a.Type != typ || err != nil {
				continue
			}
			ip = ip.Unmap()
			if !slices.ContainsFunc(info.PrimaryIPs, func(p netip.Addr) bool { return p.Is4() == ip.Is4() }) {
				info.PrimaryIPs = append(info.PrimaryIPs, ip)
			}
		}
	}
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			info.PodCIDRs = append(info.PodCIDRs, p.Masked())
		}
	}
	return info
}

// Tracker holds the model the renderer needs, per Service, and which
// Services changed since the last snapshot. Informer handlers feed it;
// an event that leaves a Service's model as it was (a status heartbeat,
// a slice rewritten with the same endpoints) does not count as a change,
// so it never causes a sync.
type Tracker struct {
	mu        sync.Mutex
	nodeName  string
	services  map[rules.ServiceKey][]rules.Service
	slices    map[rules.ServiceKey]map[string]*discoveryv1.EndpointSlice
	endpoints map[rules.ServiceKey]map[rules.ServicePortName][]rules.Endpoint
	changed   map[rules.ServiceKey]bool

	// The last snapshot's Services and endpoints, shared with it and so
	// never written: the next one is built from them, a copy patched
	// with what changed, since flattening 10,000 Services anew took
	// 5 ms of a one-endpoint sync. flatSvcs is nil when a Service
	// changed; epsDirty names the Services whose endpoints changed, with
	// their ports in flatEps then.
	flatSvcs []rules.Service
	flatEps  map[rules.ServicePortName][]rules.Endpoint
	epsDirty map[rules.ServiceKey][]rules.ServicePortName

	node        NodeInfo
	nodeChanged bool
	// peers are the other nodes' primary addresses (with --dsr, which
	// watches every Node), replaced whole on each change; peersChanged
	// since the last snapshot.
	peers        map[string][]netip.Addr
	peersChanged bool

	// triggers are the trigger times of the endpoint changes since the
	// last snapshot; svcPending the Services whose object changed then.
	triggers   []Trigger
	svcPending map[rules.ServiceKey]bool
	// started: trigger times not after it are not measured, as
	// kube-proxy's: a proxy (re)starting would count what happened
	// before it ran, and the initial list's old annotations.
	started time.Time
	now     func() time.Time

	// onChange is called (without the lock) after every change that
	// needs a sync.
	onChange func()

	// Metrics, when set, counts the Service and EndpointSlice events and
	// changes, and when a sync was last asked for. Set before the
	// informers start.
	Metrics *Metrics
	// Log gets what the tracker skips, at debug level.
	Log *slog.Logger
}

// Trigger is when an endpoint change the tracker took was triggered (the
// EndpointSlice's last-change-trigger-time), kept until the rules of
// its family reflect the change: network programming latency.
type Trigger struct {
	Service rules.ServiceKey
	Family  rules.Family
	At      time.Time
}

// NewTracker makes a tracker for the node called nodeName; onChange (may
// be nil) is told about every change that needs a sync.
func NewTracker(nodeName string, onChange func()) *Tracker {
	if onChange == nil {
		onChange = func() {}
	}
	return &Tracker{
		nodeName:   nodeName,
		services:   map[rules.ServiceKey][]rules.Service{},
		slices:     map[rules.ServiceKey]map[string]*discoveryv1.EndpointSlice{},
		endpoints:  map[rules.ServiceKey]map[rules.ServicePortName][]rules.Endpoint{},
		changed:    map[rules.ServiceKey]bool{},
		epsDirty:   map[rules.ServiceKey][]rules.ServicePortName{},
		onChange:   onChange,
		svcPending: map[rules.ServiceKey]bool{},
		started:    time.Now(),
		now:        time.Now,
		Log:        slog.New(slog.DiscardHandler),
	}
}

// UpdateService takes an added or updated Service. It returns the
// problems ServicePorts found, but only when the Service's model changed,
// so the caller reports each problem once rather than on every resync.
func (t *Tracker) UpdateService(svc *corev1.Service) []error {
	key := rules.ServiceKey{Namespace: svc.Namespace, Name: svc.Name}
	ports, problems := ServicePorts(svc)
	t.Metrics.serviceEvent()
	t.mu.Lock()
	old, had := t.services[key]
	if had == (len(ports) > 0) && (!had || reflect.DeepEqual(old, ports)) {
		t.mu.Unlock()
		return nil
	}
	if len(ports) == 0 {
		delete(t.services, key)
	} else {
		t.services[key] = ports
	}
	t.serviceChangedLocked(key)
	t.mu.Unlock()
	t.notify()
	return problems
}

// DeleteService forgets a Service.
func (t *Tracker) DeleteService(namespace, name string) {
	key := rules.ServiceKey{Namespace: namespace, Name: name}
	t.Metrics.serviceEvent()
	t.mu.Lock()
	if _, ok := t.services[key]; !ok {
		t.mu.Unlock()
		return
	}
	delete(t.services, key)
	t.serviceChangedLocked(key)
	t.mu.Unlock()
	t.notify()
}

func (t *Tracker) serviceChangedLocked(key rules.ServiceKey) {
	t.changed[key] = true
	t.flatSvcs = nil
	t.svcPending[key] = true
	t.Metrics.serviceChangesPending(len(t.svcPending))
}

// notify asks for a sync.
func (t *Tracker) notify() {
	t.Metrics.queued(t.now())
	t.onChange()
}

// sliceService is the Service an EndpointSlice belongs to; slices not
// managed for a Service have no such label and are ignored.
func sliceService(sl *discoveryv1.EndpointSlice) (rules.ServiceKey, bool) {
	name := sl.Labels[discoveryv1.LabelServiceName]
	return rules.ServiceKey{Namespace: sl.Namespace, Name: name}, name != ""
}

// UpdateSlice takes an added or updated EndpointSlice. When it changes
// the Service's endpoints, its trigger time is kept for the sync that
// programs them; a malformed one is skipped, and only it.
func (t *Tracker) UpdateSlice(sl *discoveryv1.EndpointSlice) {
	key, ok := sliceService(sl)
	if !ok {
		return
	}
	fam, famOK := sliceFamily(sl)
	if famOK {
		t.Metrics.endpointEvent()
	}
	t.mu.Lock()
	m := t.slices[key]
	if m == nil {
		m = map[string]*discoveryv1.EndpointSlice{}
		t.slices[key] = m
	}
	m[sl.Name] = sl
	changed := t.recomputeLocked(key)
	var err error
	if changed && famOK {
		var at time.Time
		if at, ok, err = TriggerTime(sl); ok && at.After(t.started) {
			t.triggers = append(t.triggers, Trigger{Service: key, Family: fam, At: at})
		}
	}
	t.mu.Unlock()
	if err != nil {
		t.Log.Debug("network programming latency not measured for this change", "err", err)
	}
	if changed {
		t.notify()
	}
}

// DeleteSlice forgets an EndpointSlice.
func (t *Tracker) DeleteSlice(sl *discoveryv1.EndpointSlice) {
	key, ok := sliceService(sl)
	if !ok {
		return
	}
	if _, ok := sliceFamily(sl); ok {
		t.Metrics.endpointEvent()
	}
	t.mu.Lock()
	if _, ok := t.slices[key][sl.Name]; !ok {
		t.mu.Unlock()
		return
	}
	delete(t.slices[key], sl.Name)
	if len(t.slices[key]) == 0 {
		delete(t.slices, key)
	}
	changed := t.recomputeLocked(key)
	if fam, ok := sliceFamily(sl); changed && ok {
		// A deleted slice's trigger time is that of its last update, not
		// of the deletion; kube-proxy then measures none of the Service's
		// pending changes of that family, and neither does herald.
		t.triggers = slices.DeleteFunc(t.triggers, func(tr Trigger) bool { return tr.Service == key && tr.Family == fam })
	}
	t.mu.Unlock()
	if changed {
		t.notify()
	}
}

// recomputeLocked merges the Service's slices again and marks it changed
// when its endpoints differ.
func (t *Tracker) recomputeLocked(key rules.ServiceKey) bool {
	list := make([]*discoveryv1.EndpointSlice, 0, len(t.slices[key]))
	for _, sl := range t.slices[key] {
		list = append(list, sl)
	}
	// Endpoints keeps the first copy of a duplicate unless a later one is
	// ready; a fixed order keeps that choice stable between events.
	slices.SortFunc(list, func(a, b *discoveryv1.EndpointSlice) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	eps := Endpoints(key.Namespace, key.Name, list)
	old := t.endpoints[key]
	if len(old) == 0 && len(eps) == 0 || reflect.DeepEqual(old, eps) {
		return false
	}
	if _, dirty := t.epsDirty[key]; !dirty {
		ports := make([]rules.ServicePortName, 0, len(old))
		for port := range old {
			ports = append(ports, port)
		}
		t.epsDirty[key] = ports
	}
	if len(eps) == 0 {
		delete(t.endpoints, key)
	} else {
		t.endpoints[key] = eps
	}
	t.changed[key] = true
	t.Metrics.endpointChangePending()
	return true
}

// UpdateNode takes this node's Node object (others are ignored). A change
// of addresses, pod CIDRs or zone needs a full sync; a change of eligibility
// only changes /healthz and is reported by the second result.
func (t *Tracker) UpdateNode(n *corev1.Node) (eligibilityChanged bool) {
	if n.Name != t.nodeName {
		return false
	}
	info := nodeInfoFrom(n)
	t.mu.Lock()
	old := t.node
	t.node = info
	rulesChanged := !old.Seen || !slices.Equal(old.IPs, info.IPs) || !slices.Equal(old.PrimaryIPs, info.PrimaryIPs) || !slices.Equal(old.PodCIDRs, info.PodCIDRs) || old.Zone != info.Zone
	if rulesChanged {
		t.nodeChanged = true
	}
	t.mu.Unlock()
	if rulesChanged {
		t.notify()
	}
	return old.Eligible != info.Eligible
}

// UpdatePeer takes any Node for direct server return's tunnel: its
// primary addresses, by name. A change needs a full sync.
func (t *Tracker) UpdatePeer(n *corev1.Node) {
	if n.Name == t.nodeName {
		return
	}
	ips := nodeInfoFrom(n).PrimaryIPs
	t.mu.Lock()
	changed := !slices.Equal(t.peers[n.Name], ips)
	if changed {
		p := maps.Clone(t.peers)
		if p == nil {
			p = map[string][]netip.Addr{}
		}
		p[n.Name] = ips
		t.peers, t.peersChanged = p, true
	}
	t.mu.Unlock()
	if changed {
		t.notify()
	}
}

// DeletePeer forgets a Node gone.
func (t *Tracker) DeletePeer(name string) {
	t.mu.Lock()
	_, had := t.peers[name]
	if had {
		p := maps.Clone(t.peers)
		delete(p, name)
		t.peers, t.peersChanged = p, true
	}
	t.mu.Unlock()
	if had {
		t.notify()
	}
}

// DeleteNode records that this node's object is gone: it is not eligible
// for traffic any more; the rules stay as they are.
func (t *Tracker) DeleteNode(name string) {
	if name != t.nodeName {
		return
	}
	t.mu.Lock()
	t.node.Eligible = false
	t.mu.Unlock()
}

// Node returns what is known about this node.
func (t *Tracker) Node() NodeInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.node
}

// Snapshot is the model at one moment, for one sync.
type Snapshot struct {
	Services  []rules.Service
	Endpoints map[rules.ServicePortName][]rules.Endpoint
	// Changed are the Services changed since the previous snapshot.
	Changed map[rules.ServiceKey]bool
	Node    NodeInfo
	// NodeChanged: the node's addresses, pod CIDRs or zone changed.
	NodeChanged bool
	// Peers are the other nodes' primary addresses (UpdatePeer), shared:
	// read only; PeersChanged says they changed since the last snapshot.
	Peers        map[string][]netip.Addr
	PeersChanged bool
	// Triggers are the trigger times of the endpoint changes in Changed
	// (those from before the tracker started, or unreadable, left out).
	Triggers []Trigger
}

// Snapshot returns the current model and resets the change set. Its
// Services and Endpoints are shared with later snapshots: read only.
func (t *Tracker) Snapshot() Snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.flatSvcs == nil {
		n := 0
		for _, ports := range t.services {
			n += len(ports)
		}
		t.flatSvcs = make([]rules.Service, 0, n)
		for _, ports := range t.services {
			t.flatSvcs = append(t.flatSvcs, ports...)
		}
	}
	if t.flatEps == nil {
		t.flatEps = make(map[rules.ServicePortName][]rules.Endpoint, len(t.endpoints))
		for _, eps := range t.endpoints {
			maps.Copy(t.flatEps, eps)
		}
	} else if len(t.epsDirty) > 0 {
		m := maps.Clone(t.flatEps)
		for key, ports := range t.epsDirty {
			for _, port := range ports {
				delete(m, port)
			}
			maps.Copy(m, t.endpoints[key])
		}
		t.flatEps = m
	}
	clear(t.epsDirty)
	s := Snapshot{
		Changed:      t.changed,
		Node:         t.node,
		NodeChanged:  t.nodeChanged,
		Peers:        t.peers,
		PeersChanged: t.peersChanged,
		Services:     t.flatSvcs,
		Endpoints:    t.flatEps,
		Triggers:     t.triggers,
	}
	t.changed = map[rules.ServiceKey]bool{}
	t.nodeChanged, t.peersChanged = false, false
	t.triggers = nil
	clear(t.svcPending)
	t.Metrics.checkedOut()
	return s
}
