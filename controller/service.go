package controller

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/controller/allocator"
	"github.com/herald-lb/herald/internal/lbapi"
)

// RequestError is a Service whose request cannot be read. Field is where
// the user has to look: an annotation or a spec field.
type RequestError = lbapi.FieldError

// Request maps a Service and its namespace's labels to what the allocator
// needs. On a RequestError the returned Service is complete except for
// the unreadable part (no requested IPs or no pool), which is enough to
// adopt the IPs it already has.
func Request(svc *corev1.Service, nsLabels map[string]string) (allocator.Service, error) {
	out := allocator.Service{
		Namespace:       svc.Namespace,
		Name:            svc.Name,
		NamespaceLabels: nsLabels,
		Labels:          svc.Labels,
		LocalTraffic:    svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
		Backend:         backend(svc),
	}
	for _, p := range svc.Spec.Ports {
		proto := string(p.Protocol)
		if proto == "" {
			proto = string(corev1.ProtocolTCP)
		}
		out.Ports = append(out.Ports, allocator.Port{Protocol: proto, Port: uint16(p.Port)})
	}
	var errs []*RequestError
	if p := svc.Spec.IPFamilyPolicy; p != nil {
		switch *p {
		case corev1.IPFamilyPolicySingleStack:
			out.FamilyPolicy = allocator.SingleStack
		case corev1.IPFamilyPolicyPreferDualStack:
			out.FamilyPolicy = allocator.PreferDualStack
		case corev1.IPFamilyPolicyRequireDualStack:
			out.FamilyPolicy = allocator.RequireDualStack
		default:
			errs = append(errs, &RequestError{Field: "spec.ipFamilyPolicy", Message: fmt.Sprintf("%q is not SingleStack, PreferDualStack or RequireDualStack", *p)})
		}
	}
	for i, f := range svc.Spec.IPFamilies {
		switch f {
		case corev1.IPv4Protocol:
			out.Families = append(out.Families, allocator.IPv4)
		case corev1.IPv6Protocol:
			out.Families = append(out.Families, allocator.IPv6)
		default:
			errs = append(errs, &RequestError{Field: fmt.Sprintf("spec.ipFamilies[%d]", i), Message: fmt.Sprintf("%q is not IPv4 or IPv6", f)})
		}
	}

	// MetalLB's names for the annotations count too (lbapi.ReadRequest);
	// a problem names the annotation the value came from.
	req, reqErrs := lbapi.ReadRequest(svc)
	out.SharingKey = req.SharingKey
	errs = append(errs, reqErrs...)
	if len(errs) > 0 {
		return out, errs[0]
	}
	out.Pool, out.RequestedIPs = req.Pool, req.IPs
	return out, nil
}

// backend identifies the pods a Service selects, for sharing under
// externalTrafficPolicy Local. A selector selects pods of its own
// namespace, so the namespace is part of it; a Service without a selector
// has endpoints nobody can compare, so it is its own backend.
func backend(svc *corev1.Service) string {
	if len(svc.Spec.Selector) == 0 {
		return "no-selector:" + svc.Namespace + "/" + svc.Name
	}
	return svc.Namespace + ":" + labels.SelectorFromSet(svc.Spec.Selector).String()
}

// Ingress is the status.loadBalancer.ingress for ips: the IPs are
// virtual IPs the nodes answer for (ipMode VIP), so kube-proxy style
// proxies short-circuit traffic to them inside the cluster.
func Ingress(ips []netip.Addr) []corev1.LoadBalancerIngress {
	if len(ips) == 0 {
		return nil
	}
	vip := corev1.LoadBalancerIPModeVIP
	out := make([]corev1.LoadBalancerIngress, len(ips))
	for i, ip := range ips {
		out[i] = corev1.LoadBalancerIngress{IP: ip.String(), IPMode: &vip}
	}
	return out
}

// sameIngress compares what herald writes: IPs in order, and ipMode (an
// API server that drops the field must not make us write forever).
func sameIngress(cur, want []corev1.LoadBalancerIngress) bool {
	return slices.EqualFunc(cur, want, func(a, b corev1.LoadBalancerIngress) bool {
		if a.IP != b.IP || a.Hostname != b.Hostname || len(a.Ports) != len(b.Ports) {
			return false
		}
		return a.IPMode == nil || b.IPMode == nil || *a.IPMode == *b.IPMode
	})
}

// servicePatch is a JSON merge patch of a Service's status and its
// ip-allocated-from-pool annotation. The UID makes it fail on a Service
// deleted and re-created under the same name since it was read.
func servicePatch(svc *corev1.Service, ingress []corev1.LoadBalancerIngress, pool string) []byte {
	var poolValue any // nil removes the annotation
	if pool != "" {
		poolValue = pool
	}
	var ing any // nil removes the list
	if len(ingress) > 0 {
		ing = ingress
	}
	p := map[string]any{
		"metadata": map[string]any{
			"uid":         svc.UID,
			"annotations": map[string]any{lbapi.AnnotationAllocatedFromPool: poolValue},
		},
		"status": map[string]any{"loadBalancer": map[string]any{"ingress": ing}},
	}
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // only plain maps and strings: cannot fail
	}
	return b
}

// annotationPatch changes only the annotation.
func annotationPatch(svc *corev1.Service, pool string) []byte {
	var poolValue any
	if pool != "" {
		poolValue = pool
	}
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         svc.UID,
		"annotations": map[string]any{lbapi.AnnotationAllocatedFromPool: poolValue},
	}})
	if err != nil {
		panic(err)
	}
	return b
}
