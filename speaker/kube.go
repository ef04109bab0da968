package speaker

import (
	"cmp"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/informer"
	"github.com/herald-lb/herald/internal/lbapi"
	"github.com/herald-lb/herald/speaker/view"
)

// sliceByService indexes EndpointSlices by "namespace/service".
const sliceByService = "service"

func sliceServiceKey(obj any) ([]string, error) {
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	name := sl.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return nil, nil
	}
	return []string{sl.Namespace + "/" + name}, nil
}

// kubeSource is the Source over informer caches.
type kubeSource struct {
	node    string
	ns      string
	lbClass string
	// v6 picks the peers' address family: that of this node's
	// memberlist address.
	v6  bool
	log *slog.Logger

	services corelisters.ServiceLister
	slices   cache.Indexer
	nodes    corelisters.NodeLister
	// listers are the configuration kinds' caches (the BGP kinds only
	// when BGP is on).
	listers   informer.Listers
	secrets   corelisters.SecretLister
	cfgDirty  atomic.Bool
	cfgMu     sync.Mutex
	cfg       *config.Config
	badStatus sync.Map // "ns/name" -> message already logged
}

// configChanged marks the configuration for parsing at the next snapshot.
func (k *kubeSource) configChanged() { k.cfgDirty.Store(true) }

// Snapshot implements Source.
func (k *kubeSource) Snapshot() Snapshot {
	snap := Snapshot{Config: k.config()}
	nodes, _ := k.nodes.List(labels.Everything())
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	for _, n := range nodes {
		an := view.Node{Name: n.Name, Labels: n.Labels}
		an.Drained, _, an.DrainErr = lbapi.NodeDrain(n)
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
				an.Addresses = append(an.Addresses, ip.Unmap())
			}
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionTrue {
				an.NetworkUnavailable = true
			}
		}
		snap.Nodes = append(snap.Nodes, an)
		if n.Name == k.node {
			for _, a := range n.Status.Addresses {
				if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
					snap.NodeIPs = append(snap.NodeIPs, ip.Unmap())
				}
			}
			for _, c := range n.Spec.PodCIDRs {
				if p, err := netip.ParsePrefix(c); err == nil {
					snap.PodCIDRs = append(snap.PodCIDRs, p.Masked())
				}
			}
		}
	}
	snap.Peers = k.peers(nodes)
	svcs, _ := k.services.List(labels.Everything())
	// Listers return map order; a fixed order keeps every sync (and
	// every speaker) reading the same input.
	slices.SortFunc(svcs, func(a, b *corev1.Service) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	for _, svc := range svcs {
		if !lbapi.Handles(svc, k.lbClass) || len(svc.Status.LoadBalancer.Ingress) == 0 {
			continue
		}
		ips, err := lbapi.StatusIPs(svc)
		key := svc.Namespace + "/" + svc.Name
		if err != nil {
			// A hand-edited status: this Service is left out, the rest
			// goes on.
			if prev, ok := k.badStatus.Load(key); !ok || prev != err.Error() {
				k.badStatus.Store(key, err.Error())
				k.log.Warn("Service not announced: unreadable status", "service", key, "err", err)
			}
			continue
		}
		k.badStatus.Delete(key)
		// Layer 2 reads the endpoints' nodes under Local only; BGP also
		// under Cluster (advertised while any endpoint serves).
		ready, servingTerminating := view.EndpointNodes(k.endpointSlices(key))
		snap.Services = append(snap.Services, view.FromService(svc, ips, ready, servingTerminating))
	}
	return snap
}

// peers are the memberlist addresses of the other nodes, sorted.
func (k *kubeSource) peers(nodes []*corev1.Node) []string {
	if nodes == nil {
		nodes, _ = k.nodes.List(labels.Everything())
	}
	var out []string
	for _, n := range nodes {
		if n.Name == k.node {
			continue
		}
		if ip := nodeIP(n, k.v6); ip.IsValid() {
			out = append(out, ip.String())
		}
	}
	slices.Sort(out)
	return out
}

// endpointSlices are the EndpointSlices of the Service ("namespace/name").
func (k *kubeSource) endpointSlices(key string) []*discoveryv1.EndpointSlice {
	objs, _ := k.slices.ByIndex(sliceByService, key)
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if sl, ok := o.(*discoveryv1.EndpointSlice); ok {
			out = append(out, sl)
		}
	}
	return out
}

// nodeIP is the node's first InternalIP of the family, else its first
// ExternalIP of it.
func nodeIP(n *corev1.Node, v6 bool) netip.Addr {
	for _, t := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type != t {
				continue
			}
			ip, err := netip.ParseAddr(a.Address)
			if err == nil && ip.Unmap().Is6() == v6 {
				return ip.Unmap()
			}
		}
	}
	return netip.Addr{}
}

// config parses the configuration when it changed since the last call.
func (k *kubeSource) config() *config.Config {
	k.cfgMu.Lock()
	defer k.cfgMu.Unlock()
	if k.cfg != nil && !k.cfgDirty.Swap(false) {
		return k.cfg
	}
	// The controller reports objects that do not decode; the speaker
	// leaves them out.
	res, _ := k.listers.Resources(k.ns)
	res.SecretsUnavailable, res.InUse = k.secrets == nil, k.inUse()
	if k.secrets != nil {
		// Passwords come from the controller's copy of those in force
		// only, so a Secret deleted or broken under a working peer
		// changes nothing here; the parser never logs a value.
		res.PasswordsFromCopy = true
		if sec, err := k.secrets.Secrets(k.ns).Get(lbapi.PasswordsSecretName); err == nil {
			res.Passwords = map[string]config.Secret{}
			for name, v := range sec.Data {
				res.Passwords[name] = config.Secret(v)
			}
		}
	}
	cfg, problems := config.Parse(res)
	// The controller reports problems on the objects; the speaker only
	// uses what parsed.
	if len(problems) > 0 {
		k.log.Debug("configuration problems (reported by the controller)", "count", len(problems))
	}
	k.cfg = cfg
	// While a pool edit is refused, whether it stays refused can depend
	// on the addresses Services hold: parse again at the next snapshot.
	if cfg.WaitsOnAddresses() {
		k.cfgDirty.Store(true)
	}
	return cfg
}

// inUse lists the addresses Services hold, as the controller reads them.
func (k *kubeSource) inUse() []config.InUse {
	svcs, _ := k.services.List(labels.Everything())
	return lbapi.InUse(svcs, k.lbClass)
}

// Service implements Source.
func (k *kubeSource) Service(ref view.ServiceRef) runtime.Object {
	svc, err := k.services.Services(ref.Namespace).Get(ref.Name)
	if err != nil {
		return nil
	}
	return svc
}

// BGPPeer implements Source.
func (k *kubeSource) BGPPeer(name string) runtime.Object {
	if u := k.listers.Get(config.KindBGPPeer, k.ns, name); u != nil {
		return u
	}
	return nil
}

// ownerUID is the Service's UID when it lives in the announcements'
// namespace, for an owner reference.
func (k *kubeSource) ownerUID(ref view.ServiceRef) types.UID {
	if ref.Namespace != k.ns {
		return ""
	}
	svc, err := k.services.Services(ref.Namespace).Get(ref.Name)
	if err != nil {
		return ""
	}
	return svc.UID
}
