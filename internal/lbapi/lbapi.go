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
