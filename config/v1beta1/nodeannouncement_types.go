package v1beta1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// NodeAnnouncementStatus says what one node advertises over BGP for every
// Service with externalTrafficPolicy Cluster: such a Service's address
// goes from this node to a peer when one of the BGPAdvertisements below
// covers the address (its pool and Service selectors) and lists the peer
// for the address's family. Nothing here names a Service, so the object
// changes with the node's sessions and advertisements, not with Services.
type NodeAnnouncementStatus struct {
	// Node doing the advertising.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Node string `json:"node"`
	// Protocol used; bgp.
	// +optional
	Protocol AnnouncementProtocol `json:"protocol"`
	// Reason the node advertises nothing at all (its network is
	// unavailable, it is excluded from external load balancers, it has
	// no Node object); empty while it may advertise.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Reason string `json:"reason,omitempty"`
	// Advertisements are the BGPAdvertisements that select this node,
	// with the peers each sends this node's prefixes to.
	// +kubebuilder:validation:MaxItems=1024
	// +listType=map
	// +listMapKey=name
	// +optional
	Advertisements []NodeAdvertisement `json:"advertisements,omitempty"`
}

// NodeAdvertisement is one BGPAdvertisement as applied on one node.
type NodeAdvertisement struct {
	// Name of the BGPAdvertisement.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// IPv4Peers receive the advertisement's IPv4 prefixes from this
	// node, as BGPPeer names; empty when no session of this node is an
	// IPv4 one the advertisement names.
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +optional
	IPv4Peers []string `json:"ipv4Peers,omitempty"`
	// IPv6Peers, the same for IPv6 prefixes.
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +optional
	IPv6Peers []string `json:"ipv6Peers,omitempty"`
}

// NodeAnnouncement is written by each speaker running BGP, one per node,
// named after the node: what the node advertises for the Services with
// externalTrafficPolicy Cluster, which every eligible node advertises
// alike. Those Services get no ServiceAnnouncement per node (that would
// be one object per Service per node); `herald status` resolves them from
// these. Services with externalTrafficPolicy Local keep a
// ServiceAnnouncement per node with a ready endpoint. Users do not write
// it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=nodeannounce,categories=herald
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Protocol",type=string,JSONPath=`.status.protocol`
// +kubebuilder:printcolumn:name="Advertisements",type=string,JSONPath=`.status.advertisements[*].name`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeAnnouncement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Status NodeAnnouncementStatus `json:"status,omitempty"`
}

// NodeAnnouncementList is a list of NodeAnnouncements.
// +kubebuilder:object:root=true
type NodeAnnouncementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeAnnouncement `json:"items"`
}
