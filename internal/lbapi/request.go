package lbapi

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/internal/ipfamily"
)

// Request is what a Service asks of herald's IP assignment through its
// annotations (herald's names or MetalLB's) and spec.loadBalancerIP.
type Request struct {
	// Pool is the address-pool annotation, trimmed; "" for any pool.
	Pool string
	// SharingKey is the allow-shared-ip annotation, trimmed.
	SharingKey string
	// IPs are the addresses of the loadBalancerIPs annotation, or of
	// spec.loadBalancerIP: at most one per family.
	IPs []netip.Addr
}

// FieldError is a request herald cannot read. Field is where the user
// has to look: "annotation <the name the value was read from>" or a spec
// field.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// ReadRequest reads the Service's request. When a part of it cannot be
// read it is left out (no pool, no IPs) and the errors say why, in the
// order pool, IPs; the sharing key is always read.
func ReadRequest(svc *corev1.Service) (Request, []*FieldError) {
	var req Request
	var errs []*FieldError
	req.SharingKey = strings.TrimSpace(ReadAnnotation(svc, AnnotationAllowSharedIP).Value)
	if a := ReadAnnotation(svc, AnnotationAddressPool); a.Set() {
		if req.Pool = strings.TrimSpace(a.Value); req.Pool == "" {
			errs = append(errs, &FieldError{annotationField(a.Key), "is empty: name an IPAddressPool or remove the annotation"})
		}
	}
	ann := ReadAnnotation(svc, AnnotationLoadBalancerIPs)
	switch {
	case ann.Set() && svc.Spec.LoadBalancerIP != "":
		errs = append(errs, &FieldError{annotationField(ann.Key),
			fmt.Sprintf("is set together with spec.loadBalancerIP (%q): use only the annotation (spec.loadBalancerIP is deprecated)", svc.Spec.LoadBalancerIP)})
	case ann.Set():
		ips, err := parseIPList(ann.Value)
		if err != nil {
			errs = append(errs, &FieldError{annotationField(ann.Key), err.Error()})
		}
		req.IPs = ips
	case svc.Spec.LoadBalancerIP != "":
		ip, err := parseIP(svc.Spec.LoadBalancerIP)
		if err != nil {
			errs = append(errs, &FieldError{"spec.loadBalancerIP", err.Error()})
		} else {
			req.IPs = []netip.Addr{ip}
		}
	}
	if len(errs) > 0 {
		req.IPs, req.Pool = nil, ""
	}
	return req, errs
}

func annotationField(name string) string { return "annotation " + name }

// parseIPList reads herald.io/loadBalancerIPs: one or two addresses,
// comma-separated, at most one per family.
func parseIPList(s string) ([]netip.Addr, error) {
	parts := strings.Split(s, ",")
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("is empty: give one IP address per family, comma-separated, or remove the annotation")
	}
	if len(parts) > 2 {
		return nil, fmt.Errorf("%q has %d entries: give at most one IPv4 and one IPv6 address", s, len(parts))
	}
	var ips []netip.Addr
	for _, p := range parts {
		ip, err := parseIP(strings.TrimSpace(p))
		if err != nil {
			return nil, err
		}
		if len(ips) == 1 && ips[0].Is4() == ip.Is4() {
			return nil, fmt.Errorf("%q has two %s addresses: give at most one per family", s, ipfamily.Of(ip))
		}
		ips = append(ips, ip)
	}
	return ips, nil
}

func parseIP(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, fmt.Errorf("has an empty entry: give IP addresses separated by a comma")
	}
	ip, err := netip.ParseAddr(s)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	if ip.Is4In6() {
		return netip.Addr{}, fmt.Errorf("%q is an IPv4-mapped IPv6 address: write it as %s", s, ip.Unmap())
	}
	return ip, nil
}
