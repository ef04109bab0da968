package proxy

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/herald-lb/herald/proxy/rules"
)

// LabelServiceProxyName marks a Service as handled by another proxy;
// herald leaves such Services alone, as kube-proxy does.
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// LabelHeadless marks the EndpointSlices of headless Services.
const LabelHeadless = "service.kubernetes.io/headless"

// AnnotationForwarding asks for a Service's load-balancer traffic to be
// forwarded by direct server return ("dsr"; rules.ForwardingDSR) instead
// of kube-proxy's SNAT ("snat", the default).
const AnnotationForwarding = "herald.io/forwarding"

// Skipped tells why a Service gets no rules, or "" when it gets some.
func Skipped(svc *corev1.Service) string {
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return "type ExternalName"
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		return "headless"
	case svc.Spec.ClusterIP == "":
		return "no cluster IP yet"
	case svc.Labels[LabelServiceProxyName] != "":
		return "handled by proxy " + svc.Labels[LabelServiceProxyName]
	}
	return ""
}

// externallyAccessible is when externalTrafficPolicy means anything: the
// API ignores it for Services that cannot be reached from outside.
func externallyAccessible(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer || len(svc.Spec.ExternalIPs) > 0
}

// ServicePorts reduces a Service to one rules.Service per port. Fields it
// cannot parse are left out and reported, naming the Service and the
// field; the rest of the Service still gets its rules.
func ServicePorts(svc *corev1.Service) ([]rules.Service, []error) {
	if Skipped(svc) != "" {
		return nil, nil
	}
	var problems []error
	bad := func(field, format string, args ...any) {
		problems = append(problems, fmt.Errorf("service %s/%s: %s: %s", svc.Namespace, svc.Name, field, fmt.Sprintf(format, args...)))
	}
	base := rules.Service{Namespace: svc.Namespace, Name: svc.Name}
	clusterIPs := svc.Spec.ClusterIPs
	if len(clusterIPs) == 0 {
		clusterIPs = []string{svc.Spec.ClusterIP}
	}
	for i, s := range clusterIPs {
		if a, err := netip.ParseAddr(s); err == nil {
			base.ClusterIPs = append(base.ClusterIPs, a.Unmap())
		} else {
			bad(fmt.Sprintf("spec.clusterIPs[%d]", i), "%q is not an IP address", s)
		}
	}
	for i, s := range svc.Spec.ExternalIPs {
		if a, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
			base.ExternalIPs = append(base.ExternalIPs, a.Unmap())
		} else {
			bad(fmt.Sprintf("spec.externalIPs[%d]", i), "%q is not an IP address", s)
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for i, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP == "" {
				continue // a hostname-only ingress has nothing to program
			}
			a, err := netip.ParseAddr(ing.IP)
			if err != nil {
				bad(fmt.Sprintf("status.loadBalancer.ingress[%d].ip", i), "%q is not an IP address", ing.IP)
				continue
			}
			in := rules.Ingress{IP: a.Unmap()}
			if ing.IPMode != nil && *ing.IPMode == corev1.LoadBalancerIPModeProxy {
				in.Mode = rules.IPModeProxy
			}
			base.LoadBalancerIngress = append(base.LoadBalancerIngress, in)
		}
		for i, s := range svc.Spec.LoadBalancerSourceRanges {
			p, err := netip.ParsePrefix(strings.TrimSpace(s))
			if err != nil {
				// Restricted to what parses rather than opened to all.
				base.SourceRangesInvalid = true
				bad(fmt.Sprintf("spec.loadBalancerSourceRanges[%d]", i), "%q is not a CIDR", s)
				continue
			}
			base.LoadBalancerSourceRanges = append(base.LoadBalancerSourceRanges, p.Masked())
		}
	}
	if externallyAccessible(svc) && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		base.ExternalTrafficPolicy = rules.PolicyLocal
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			base.HealthCheckNodePort = int(svc.Spec.HealthCheckNodePort)
		}
	}
	if p := svc.Spec.InternalTrafficPolicy; p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal {
		base.InternalTrafficPolicy = rules.PolicyLocal
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		base.SessionAffinity = rules.AffinityClientIP
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			base.AffinityTimeout = int(*c.ClientIP.TimeoutSeconds)
		}
	}
	switch v, set := svc.Annotations[AnnotationForwarding]; {
	case !set:
	case strings.EqualFold(strings.TrimSpace(v), "dsr"):
		base.Forwarding = rules.ForwardingDSR
	case strings.EqualFold(strings.TrimSpace(v), "snat"):
	default:
		bad("metadata.annotations["+AnnotationForwarding+"]", "%q is not dsr or snat; forwarding stays SNAT", v)
	}
	out := make([]rules.Service, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		s := base
		s.PortName = p.Name
		s.Protocol = rules.Protocol(p.Protocol)
		if s.Protocol == "" {
			s.Protocol = rules.TCP
		}
		s.Port = int(p.Port)
		s.NodePort = int(p.NodePort)
		out = append(out, s)
	}
	return out, problems
}

// Endpoints merges the EndpointSlices of one Service into the endpoints of
// each of its ports. An endpoint listed by two slices (which happens
// while the controller moves it) is taken once, preferring the ready copy.
func Endpoints(namespace, service string, slices []*discoveryv1.EndpointSlice) map[rules.ServicePortName][]rules.Endpoint {
	type key struct {
		port rules.ServicePortName
		ip   netip.Addr
		num  int
	}
	seen := map[key]rules.Endpoint{}
	for _, sl := range slices {
		if _, ok := sliceFamily(sl); !ok {
			continue
		}
		for _, p := range sl.Ports {
			if p.Port == nil {
				continue
			}
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			spn := rules.ServicePortName{Namespace: namespace, Name: service, Port: name}
			for _, ep := range sl.Endpoints {
				if len(ep.Addresses) == 0 {
					continue
				}
				a, err := netip.ParseAddr(ep.Addresses[0])
				if err != nil {
					continue // the API server validates addresses; nothing to program
				}
				e := rules.Endpoint{
					IP:          a.Unmap(),
					Port:        int(*p.Port),
					Ready:       ep.Conditions.Ready == nil || *ep.Conditions.Ready,
					Terminating: ep.Conditions.Terminating != nil && *ep.Conditions.Terminating,
				}
				e.Serving = ep.Conditions.Serving == nil || *ep.Conditions.Serving
				if ep.NodeName != nil {
					e.NodeName = *ep.NodeName
				}
				e.ZoneHints, e.NodeHints = hintNames(ep.Hints)
				k := key{spn, e.IP, e.Port}
				if old, ok := seen[k]; ok && old.Ready && !e.Ready {
					continue
				}
				seen[k] = e
			}
		}
	}
	out := map[rules.ServicePortName][]rules.Endpoint{}
	for k, e := range seen {
		out[k.port] = append(out[k.port], e)
	}
	for _, eps := range out {
		sort.Slice(eps, func(i, j int) bool {
			if c := eps[i].IP.Compare(eps[j].IP); c != 0 {
				return c < 0
			}
			return eps[i].Port < eps[j].Port
		})
	}
	return out
}

// TriggerTime reads an EndpointSlice's
// endpoints.kubernetes.io/last-change-trigger-time, which the
// EndpointSlice controller sets to when the change of a Pod or Service
// that it carries happened: where network programming latency starts.
// ok is false without the annotation; a value that does not parse as
// RFC 3339 is an error, for the caller to skip (as kube-proxy does).
func TriggerTime(sl *discoveryv1.EndpointSlice) (at time.Time, ok bool, err error) {
	v, ok := sl.Annotations[corev1.EndpointsLastChangeTriggerTime]
	if !ok {
		return time.Time{}, false, nil
	}
	at, err = time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("endpointslice %s/%s: annotation %s: %q is not an RFC 3339 time", sl.Namespace, sl.Name, corev1.EndpointsLastChangeTriggerTime, v)
	}
	return at, true, nil
}

// sliceFamily is the address family of an EndpointSlice's endpoints;
// false for FQDN slices, which the proxy does not program.
func sliceFamily(sl *discoveryv1.EndpointSlice) (rules.Family, bool) {
	switch sl.AddressType {
	case discoveryv1.AddressTypeIPv4:
		return rules.IPv4, true
	case discoveryv1.AddressTypeIPv6:
		return rules.IPv6, true
	}
	return 0, false
}

// hintNames returns the zone and node names of an endpoint's hints, in
// their order, nil when there are none. The names are only compared with
// this node's name and zone, so no spelling can do harm.
func hintNames(h *discoveryv1.EndpointHints) (zones, nodes []string) {
	if h == nil {
		return nil, nil
	}
	for _, z := range h.ForZones {
		zones = append(zones, z.Name)
	}
	for _, n := range h.ForNodes {
		nodes = append(nodes, n.Name)
	}
	return zones, nodes
}
