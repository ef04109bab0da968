// Package lbapi is herald's contract on the Kubernetes objects its
// components share: which Services herald handles and the addresses in
// their status, the Service annotations, the Secrets the controller
// creates for the speakers, and the reasons of the Valid condition on
// configuration objects. The controller writes these, the speakers and
// `herald status` read them; none of them imports another for it.
package lbapi

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/config"
)

// The Service annotations herald reads, and the one it writes.
const (
	AnnotationLoadBalancerIPs = "herald.io/loadBalancerIPs"
	AnnotationAddressPool     = "herald.io/address-pool"
	AnnotationAllowSharedIP   = "herald.io/allow-shared-ip"
	// AnnotationAllocatedFromPool names the pool of the Service's IPs.
	AnnotationAllocatedFromPool = "herald.io/ip-allocated-from-pool"
)

// AnnotationAliases are the names MetalLB gives herald's request
// annotations, the newer first, so Services written for MetalLB keep
// their requests when herald takes over. herald's own name wins over
// both, MetalLB's newer over its older, as MetalLB reads them.
var AnnotationAliases = map[string][]string{
	AnnotationLoadBalancerIPs: {"metallb.io/loadBalancerIPs", "metallb.universe.tf/loadBalancerIPs"},
	AnnotationAddressPool:     {"metallb.io/address-pool", "metallb.universe.tf/address-pool"},
	AnnotationAllowSharedIP:   {"metallb.io/allow-shared-ip", "metallb.universe.tf/allow-shared-ip"},
}

// Annotation is one of herald's request annotations as read from a
// Service, under its own name or an alias.
type Annotation struct {
	// Name is herald's name of the annotation.
	Name string
	// Key is the annotation the value was read from: Name, an alias, or
	// "" when none is set.
	Key   string
	Value string
	// Overridden are the other names set on the Service with another
	// value, which herald does not use.
	Overridden []string
}

// Set reports whether the Service carries the annotation under any name.
func (a Annotation) Set() bool { return a.Key != "" }

// ReadAnnotation reads herald's annotation name from svc, falling back to
// its MetalLB aliases.
func ReadAnnotation(svc *corev1.Service, name string) Annotation {
	a := Annotation{Name: name}
	for _, k := range append([]string{name}, AnnotationAliases[name]...) {
		v, ok := svc.Annotations[k]
		switch {
		case !ok:
		case a.Key == "":
			a.Key, a.Value = k, v
		case strings.TrimSpace(v) != strings.TrimSpace(a.Value):
			a.Overridden = append(a.Overridden, k)
		}
	}
	return a
}

// AliasNotes describe a Service's use of MetalLB's annotation names:
// notes (normal events) for each alias herald reads in place of its own
// name, conflicts (warnings) for names set to values herald does not use.
func AliasNotes(svc *corev1.Service) (notes, conflicts []string) {
	for _, name := range []string{AnnotationAddressPool, AnnotationAllowSharedIP, AnnotationLoadBalancerIPs} {
		a := ReadAnnotation(svc, name)
		if a.Set() && a.Key != name {
			notes = append(notes, fmt.Sprintf("herald reads %s (%q) as %s; rename the annotation to %s", a.Key, a.Value, name, name))
		}
		for _, k := range a.Overridden {
			conflicts = append(conflicts, fmt.Sprintf("%s (%q) and %s (%q) disagree: herald uses %s", a.Key, a.Value, k, svc.Annotations[k], a.Key))
		}
	}
	return notes, conflicts
}

// The Secrets the controller creates in herald's namespace for the
// speakers.
const (
	// MemberlistSecretName holds the key material of the speakers'
	// memberlist encryption, under MemberlistSecretKey (and, during a key
	// rotation, MemberlistSecretKey + "-<anything>").
	MemberlistSecretName = "herald-memberlist"
	MemberlistSecretKey  = "secretkey"
	// PasswordsSecretName is the controller's copy of the BGP passwords in
	// force, one key per BGPPeer: the speakers read passwords only here,
	// and a peer whose passwordSecret breaks keeps the one it had.
	PasswordsSecretName = "herald-bgp-passwords"
)

// ConditionAdvertised is the IPAddressPool condition the controller
// writes: False (reason NotAdvertised) when no L2Advertisement or
// BGPAdvertisement selects the pool.
const ConditionAdvertised = "Advertised"

// Reasons of the Valid condition on configuration objects.
const (
	ReasonValid         = "Valid"
	ReasonInvalid       = "Invalid"
	ReasonPartlyIgnored = "PartlyIgnored"
	// ReasonEditRefused: the current spec (or the Secret it names) is
	// invalid, and the last valid version stays in force.
	ReasonEditRefused = "EditRefused"
)

// Handles reports whether a controller for lbClass ("" for Services
// without a class) assigns the Service's IPs.
func Handles(svc *corev1.Service, lbClass string) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	if svc.Spec.LoadBalancerClass == nil {
		return lbClass == ""
	}
	return *svc.Spec.LoadBalancerClass == lbClass
}

// StatusIPs returns the IPs of the Service's status.loadBalancer.ingress
// (entries with only a hostname are skipped).
func StatusIPs(svc *corev1.Service) ([]netip.Addr, error) {
	var out []netip.Addr
	for i, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP == "" {
			continue
		}
		ip, err := netip.ParseAddr(in.IP)
		if err != nil {
			return nil, fmt.Errorf("status.loadBalancer.ingress[%d].ip: %q is not an IP address", i, in.IP)
		}
		out = append(out, ip)
	}
	return out, nil
}

// InUse lists the addresses in the status of the Services of the class,
// for the configuration parser; the controller and the speakers read them
// alike.
func InUse(svcs []*corev1.Service, lbClass string) []config.InUse {
	var out []config.InUse
	for _, s := range svcs {
		if !Handles(s, lbClass) {
			continue
		}
		ips, err := StatusIPs(s)
		if err != nil {
			continue
		}
		for _, ip := range ips {
			out = append(out, config.InUse{Addr: ip, Service: s.Namespace + "/" + s.Name})
		}
	}
	return out
}
