package v1beta1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Implementation note, kept out of the CRD description: the last rule below
// orders the two ends of a range, which CEL cannot do for IP addresses. It
// builds the CIDRs start/0 .. start/32 (or /128), counts how many of them
// contain the end (n, one more than the common prefix length) and asks
// whether bit n-1 of the start is 0, i.e. whether start/n contains the
// network address of start/(n-1). It is shaped by the API server's cost
// estimator: Kubernetes CEL has no cel.bind, so values are named with
// "[value].all(name, ...)", and only IPs, CIDRs and strings of known length
// are named that way, because the estimator treats strings made by
// string(ip) or join() as unbounded and refuses the CRD. Two addresses are
// compared with containsIP on the first one's /32 or /128, not ==: the
// estimator of Kubernetes 1.31, the oldest herald supports, counts == on
// IPs and CIDRs as unbounded (make compat found it). Its estimated cost
// times MaxItems of addresses must stay under 10,000,000 (about 87% used
// before that change); the tests in config/crd check it.

// AddressEntry is one block of addresses in a pool: a CIDR (192.0.2.0/24,
// 2001:db8::/120) or an inclusive range of two addresses of one family
// (192.0.2.10-192.0.2.20). Host bits past a CIDR's prefix are refused rather
// than silently masked, so what users read is what herald hands out.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=100
// +kubebuilder:validation:XValidation:rule="self.contains('-') ? (self.split('-').size() == 2 && isIP(self.split('-')[0].trim()) && isIP(self.split('-')[1].trim())) : isCIDR(self)",message="must be a CIDR such as 192.0.2.0/24 or a range of two addresses such as 192.0.2.10-192.0.2.20"
// +kubebuilder:validation:XValidation:rule="self.contains('-') || !isCIDR(self) || cidr(self.substring(0, self.indexOf('/')) + (cidr(self).ip().family() == 4 ? '/32' : '/128')).containsIP(cidr(self).masked().ip())",message="a CIDR must have no bits set past its prefix length: use its network address"
// +kubebuilder:validation:XValidation:rule="!self.contains('-') || self.split('-').size() != 2 || !isIP(self.split('-')[0].trim()) || !isIP(self.split('-')[1].trim()) || ip(self.split('-')[0].trim()).family() == ip(self.split('-')[1].trim()).family()",message="both ends of a range must be of the same IP family"
// +kubebuilder:validation:XValidation:rule="!self.contains('-') || self.split('-').size() != 2 || !isIP(self.split('-')[0].trim()) || !isIP(self.split('-')[1].trim()) || ip(self.split('-')[0].trim()).family() != ip(self.split('-')[1].trim()).family() || [ip(self.split('-')[1].trim())].all(b, [self.split('-')[0].trim()].all(a, cidr(a + (ip(a).family() == 4 ? '/32' : '/128')).containsIP(b) || [ip(a).family() == 6].all(v6, [['/0', '/1', '/2', '/3', '/4', '/5', '/6', '/7', '/8', '/9', '/10', '/11', '/12', '/13', '/14', '/15', '/16', '/17', '/18', '/19', '/20', '/21', '/22', '/23', '/24', '/25', '/26', '/27', '/28', '/29', '/30', '/31', '/32', '/33', '/34', '/35', '/36', '/37', '/38', '/39', '/40', '/41', '/42', '/43', '/44', '/45', '/46', '/47', '/48', '/49', '/50', '/51', '/52', '/53', '/54', '/55', '/56', '/57', '/58', '/59', '/60', '/61', '/62', '/63', '/64', '/65', '/66', '/67', '/68', '/69', '/70', '/71', '/72', '/73', '/74', '/75', '/76', '/77', '/78', '/79', '/80', '/81', '/82', '/83', '/84', '/85', '/86', '/87', '/88', '/89', '/90', '/91', '/92', '/93', '/94', '/95', '/96', '/97', '/98', '/99', '/100', '/101', '/102', '/103', '/104', '/105', '/106', '/107', '/108', '/109', '/110', '/111', '/112', '/113', '/114', '/115', '/116', '/117', '/118', '/119', '/120', '/121', '/122', '/123', '/124', '/125', '/126', '/127', '/128'].filter(s, v6 || s.size() == 2 || (s.size() == 3 && s <= '/32')).map(s, cidr(a + s))].all(x, [x.filter(c, c.containsIP(b)).size()].all(n, x[n].containsIP(x[n - 1].masked().ip()))))))",message="the start of a range must not be greater than its end"
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

	// InForce is the version of the pool herald uses (see ConfigStatus).
	// +optional
	InForce *InForce `json:"inForce,omitempty"`
}

// IPAddressPool is a set of addresses herald assigns to LoadBalancer Services.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=hpool,categories=herald
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
