package v1beta1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// AddressEntry is one block of addresses in a pool: a CIDR (192.0.2.0/24,
// 2001:db8::/120) or an inclusive range of two addresses of one family
// (192.0.2.10-192.0.2.20). Host bits past a CIDR's prefix are refused rather
// than silently masked, so what users read is what herald hands out.
//
// The last rule compares the two ends of a range by expanding each to a
// fixed-width digit string (three digits per IPv4 octet, four hex digits per
// IPv6 group) because CEL has no ordering on IP addresses.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=100
// +kubebuilder:validation:XValidation:rule="self.contains('-') ? (self.split('-').size() == 2 && isIP(self.split('-')[0].trim()) && isIP(self.split('-')[1].trim())) : isCIDR(self)",message="must be a CIDR such as 192.0.2.0/24 or a range of two addresses such as 192.0.2.10-192.0.2.20"
// +kubebuilder:validation:XValidation:rule="self.contains('-') || !isCIDR(self) || cidr(self) == cidr(self).masked()",message="a CIDR must have no bits set past its prefix length: use its network address"
// +kubebuilder:validation:XValidation:rule="!self.contains('-') || self.split('-').size() != 2 || !isIP(self.split('-')[0].trim()) || !isIP(self.split('-')[1].trim()) || ip(self.split('-')[0].trim()).family() == ip(self.split('-')[1].trim()).family()",message="both ends of a range must be of the same IP family"
// +kubebuilder:validation:XValidation:rule="!self.contains('-') || self.split('-').size() != 2 || !isIP(self.split('-')[0].trim()) || !isIP(self.split('-')[1].trim()) || ip(self.split('-')[0].trim()).family() != ip(self.split('-')[1].trim()).family() || cel.bind(k, self.split('-').map(x, cel.bind(s, string(ip(x.trim())), s.contains(':') ? cel.bind(h, s.split('::'), cel.bind(l, h[0].size() == 0 ? h[0] : h[0].split(':').map(g, '0000'.substring(0, 4 - g.size()) + g).join(), cel.bind(r, h.size() < 2 || h[1].size() == 0 ? h[0].substring(0, 0) : h[1].split(':').map(g, '0000'.substring(0, 4 - g.size()) + g).join(), l + '00000000000000000000000000000000'.substring(0, 32 - l.size() - r.size()) + r))) : s.split('.').map(o, '000'.substring(0, 3 - o.size()) + o).join())), k[0] <= k[1])",message="the start of a range must not be greater than its end"
type AddressEntry string

// ServiceAllocation restricts a pool to some Services and orders it against
// other pools.
// +kubebuilder:validation:XValidation:rule="has(self.priority) || has(self.namespaces) || has(self.namespaceSelectors) || has(self.serviceSelectors)",message="serviceAllocation must set at least one of priority, namespaces, namespaceSelectors or serviceSelectors"
type ServiceAllocation struct {
	// Priority orders pools that match a Service: lower numbers are tried
	// first; pools without a priority come after all pools with one.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	Priority *int32 `json:"priority,omitempty"`

	// Namespaces whose Services may take addresses from this pool.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +listType=set
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`

	// NamespaceSelectors select the namespaces whose Services may take
	// addresses from this pool (in addition to Namespaces).
	// +kubebuilder:validation:MaxItems=32
	// +optional
	NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors,omitempty"`

	// ServiceSelectors select the Services that may take addresses from this
	// pool. With namespaces too, a Service must match both.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	ServiceSelectors []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// IPAddressPoolSpec says which addresses herald may hand out and to whom.
type IPAddressPoolSpec struct {
	// Addresses are CIDRs or ranges, IPv4 and IPv6 may be mixed.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	Addresses []AddressEntry `json:"addresses"`

	// AutoAssign lets the controller give this pool's addresses to Services
	// that did not ask for it by name or address.
	// +kubebuilder:default=true
	// +optional
	AutoAssign *bool `json:"autoAssign,omitempty"`

	// AvoidBuggyIPs skips IPv4 addresses ending in .0 or .255, which some
	// old client stacks mistake for broadcast addresses.
	// +optional
	AvoidBuggyIPs bool `json:"avoidBuggyIPs,omitempty"`

	// ServiceAllocation restricts the pool to some Services and sets its
	// priority.
	// +optional
	ServiceAllocation *ServiceAllocation `json:"serviceAllocation,omitempty"`
}

// IPAddressPoolStatus is kept current by the controller. Counts that exceed
// the int64 range (large IPv6 pools) are reported as the int64 maximum.
type IPAddressPoolStatus struct {
	// +optional
	AssignedIPv4 int64 `json:"assignedIPv4"`
	// +optional
	AssignedIPv6 int64 `json:"assignedIPv6"`
	// +optional
	AvailableIPv4 int64 `json:"availableIPv4"`
	// +optional
	AvailableIPv6 int64 `json:"availableIPv6"`

	// Conditions report whether herald accepted the pool and, if not, why.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// IPAddressPool is a set of addresses herald assigns to LoadBalancer Services.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ippool;ippools,categories=herald
// +kubebuilder:printcolumn:name="Addresses",type=string,JSONPath=`.spec.addresses`
// +kubebuilder:printcolumn:name="Auto Assign",type=boolean,JSONPath=`.spec.autoAssign`
// +kubebuilder:printcolumn:name="Assigned IPv4",type=integer,JSONPath=`.status.assignedIPv4`
// +kubebuilder:printcolumn:name="Available IPv4",type=integer,JSONPath=`.status.availableIPv4`
// +kubebuilder:printcolumn:name="Assigned IPv6",type=integer,JSONPath=`.status.assignedIPv6`
// +kubebuilder:printcolumn:name="Available IPv6",type=integer,JSONPath=`.status.availableIPv6`
// +kubebuilder:printcolumn:name="Valid",type=string,JSONPath=`.status.conditions[?(@.type=="Valid")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IPAddressPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec IPAddressPoolSpec `json:"spec"`
	// +optional
	Status IPAddressPoolStatus `json:"status,omitempty"`
}

// IPAddressPoolList is a list of IPAddressPools.
// +kubebuilder:object:root=true
type IPAddressPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPAddressPool `json:"items"`
}
