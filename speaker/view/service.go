package view

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/herald-lb/herald/internal/lbapi"
)

// FromService is svc as the plans read it, with ips its
// status.loadBalancer.ingress addresses (lbapi.StatusIPs) and the nodes
// of its endpoints (EndpointNodes). The speakers and `herald status`
// build their Services with it, so both see the same input.
func FromService(svc *corev1.Service, ips []netip.Addr, ready, servingTerminating map[string]bool) Service {
	return Service{
		Namespace: svc.Namespace, Name: svc.Name, Labels: svc.Labels, IPs: ips,
		Pool:                    svc.Annotations[lbapi.AnnotationAllocatedFromPool],
		Local:                   svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
		ReadyNodes:              ready,
		ServingTerminatingNodes: servingTerminating,
	}
}

// EndpointNodes returns the nodes with a ready endpoint in a Service's
// EndpointSlices, and those with one that is terminating but still
// serving; endpoints without a node are left out. Both maps are non-nil.
func EndpointNodes(slices []*discoveryv1.EndpointSlice) (ready, servingTerminating map[string]bool) {
	ready, servingTerminating = map[string]bool{}, map[string]bool{}
	for _, sl := range slices {
		for _, ep := range sl.Endpoints {
			if ep.NodeName == nil || *ep.NodeName == "" {
				continue
			}
			c := ep.Conditions
			isReady := c.Ready == nil || *c.Ready
			serving := isReady
			if c.Serving != nil {
				serving = *c.Serving
			}
			terminating := c.Terminating != nil && *c.Terminating
			switch {
			case isReady && !terminating:
				ready[*ep.NodeName] = true
			case serving && terminating:
				servingTerminating[*ep.NodeName] = true
			}
		}
	}
	return ready, servingTerminating
}
