package v1beta1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// L2AdvertisementSpec says which pools are announced over layer 2 (ARP/NDP)
// and from which nodes and interfaces. With neither ipAddressPools nor
// ipAddressPoolSelectors set, it covers every pool.
type L2AdvertisementSpec struct {
	// IPAddressPools names pools announced by this advertisement.
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +optional
	IPAddressPools []ObjectName `json:"ipAddressPools,omitempty"`

	// IPAddressPoolSelectors select pools by label (in addition to the names).
	// +kubebuilder:validation:MaxItems=32
	// +optional
	IPAddressPoolSelectors []metav1.LabelSelector `json:"ipAddressPoolSelectors,omitempty"`

	// NodeSelectors limit the nodes that may announce; empty means all nodes.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`

	// Interfaces limit the interfaces answering ARP/NDP; empty means every
	// interface with a route towards the address.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	Interfaces []InterfaceName `json:"interfaces,omitempty"`

	// ServiceSelectors limit the Services announced; empty means all.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	ServiceSelectors []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// L2Advertisement announces pools' addresses on the local network segment.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=l2adv,categories=herald
// +kubebuilder:printcolumn:name="IPAddressPools",type=string,JSONPath=`.spec.ipAddressPools`
// +kubebuilder:printcolumn:name="Node Selectors",type=string,JSONPath=`.spec.nodeSelectors`,priority=10
// +kubebuilder:printcolumn:name="Interfaces",type=string,JSONPath=`.spec.interfaces`
// +kubebuilder:printcolumn:name="Valid",type=string,JSONPath=`.status.conditions[?(@.type=="Valid")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type L2Advertisement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec L2AdvertisementSpec `json:"spec,omitempty"`
	// +optional
	Status ConfigStatus `json:"status,omitempty"`
}

// L2AdvertisementList is a list of L2Advertisements.
// +kubebuilder:object:root=true
type L2AdvertisementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []L2Advertisement `json:"items"`
}

// CommunityValue is a BGP community: a standard community "ASN:value" (two
// 16-bit numbers), a large community "large:ASN:value1:value2" (three 32-bit
// numbers), or the name of an alias from a Community object or a well-known
// community (no-export, no-advertise, no-export-subconfed, no-peer,
// blackhole, graceful-shutdown).
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:XValidation:rule="self.contains(':') ? (self.matches('^[0-9]+:[0-9]+$') || self.matches('^large:[0-9]+:[0-9]+:[0-9]+$')) : self.matches('^[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$')",message="must be 'ASN:value', 'large:ASN:value1:value2', or an alias name of letters, digits, '-', '_' and '.'"
// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]+:[0-9]+$') || self.split(':').all(p, p.size() <= 5 && int(p) <= 65535)",message="each part of a standard community must be between 0 and 65535"
// +kubebuilder:validation:XValidation:rule="!self.matches('^large:[0-9]+:[0-9]+:[0-9]+$') || self.substring(6).split(':').all(p, p.size() <= 10 && int(p) <= 4294967295)",message="each part of a large community must be between 0 and 4294967295"
type CommunityValue string

// BGPAdvertisementSpec says which pools are announced over BGP, to which
// peers, from which nodes, and with which attributes. With neither
// ipAddressPools nor ipAddressPoolSelectors set, it covers every pool.
type BGPAdvertisementSpec struct {
	// AggregationLength is the prefix length announced for IPv4 addresses;
	// 32 announces each address on its own.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=32
	// +kubebuilder:default=32
	// +optional
	AggregationLength *int32 `json:"aggregationLength,omitempty"`

	// AggregationLengthV6 is the prefix length announced for IPv6 addresses.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=128
	// +kubebuilder:default=128
	// +optional
	AggregationLengthV6 *int32 `json:"aggregationLengthV6,omitempty"`

	// The bounds keep values a uint32 cannot hold out of the API server: one
	// such object would make herald fail to decode the whole list.

	// LocalPref is the LOCAL_PREF attribute; it is only sent to iBGP peers.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	// +optional
	LocalPref *uint32 `json:"localPref,omitempty"`

	// Communities attached to the announced routes.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	Communities []CommunityValue `json:"communities,omitempty"`

	// IPAddressPools names pools announced by this advertisement.
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +optional
	IPAddressPools []ObjectName `json:"ipAddressPools,omitempty"`

	// IPAddressPoolSelectors select pools by label (in addition to the names).
	// +kubebuilder:validation:MaxItems=32
	// +optional
	IPAddressPoolSelectors []metav1.LabelSelector `json:"ipAddressPoolSelectors,omitempty"`

	// NodeSelectors limit the nodes that announce; empty means all nodes.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`

	// Peers names the BGPPeers to announce to; empty means all peers.
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +optional
	Peers []ObjectName `json:"peers,omitempty"`

	// ServiceSelectors limit the Services announced; empty means all.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	ServiceSelectors []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// BGPAdvertisement announces pools' addresses to BGP peers.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bgpadv,categories=herald
// +kubebuilder:printcolumn:name="IPAddressPools",type=string,JSONPath=`.spec.ipAddressPools`
// +kubebuilder:printcolumn:name="Peers",type=string,JSONPath=`.spec.peers`
// +kubebuilder:printcolumn:name="Node Selectors",type=string,JSONPath=`.spec.nodeSelectors`,priority=10
// +kubebuilder:printcolumn:name="Valid",type=string,JSONPath=`.status.conditions[?(@.type=="Valid")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BGPAdvertisement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec BGPAdvertisementSpec `json:"spec,omitempty"`
	// +optional
	Status ConfigStatus `json:"status,omitempty"`
}

// BGPAdvertisementList is a list of BGPAdvertisements.
// +kubebuilder:object:root=true
type BGPAdvertisementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPAdvertisement `json:"items"`
}

// CommunityAlias gives a community value a name.
type CommunityAlias struct {
	// Name is what BGPAdvertisements write instead of the value.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$`
	Name string `json:"name"`

	// Value is a standard ("ASN:value") or large ("large:ASN:value1:value2")
	// community; aliases of aliases are not allowed.
	// +kubebuilder:validation:XValidation:rule="self.contains(':')",message="an alias value must be a community number ('ASN:value' or 'large:ASN:value1:value2'), not another alias"
	Value CommunityValue `json:"value"`
}

// CommunitySpec lists community aliases.
type CommunitySpec struct {
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=name
	Communities []CommunityAlias `json:"communities"`
}

// Community defines names for BGP community values.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=herald
// +kubebuilder:printcolumn:name="Valid",type=string,JSONPath=`.status.conditions[?(@.type=="Valid")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Community struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec CommunitySpec `json:"spec"`
	// +optional
	Status ConfigStatus `json:"status,omitempty"`
}

// CommunityList is a list of Communities.
// +kubebuilder:object:root=true
type CommunityList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Community `json:"items"`
}
