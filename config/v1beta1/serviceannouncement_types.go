package v1beta1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// AnnouncementProtocol is how a node announces a Service's addresses.
// +kubebuilder:validation:Enum=layer2;bgp
type AnnouncementProtocol string

const (
	ProtocolLayer2 AnnouncementProtocol = "layer2"
	ProtocolBGP    AnnouncementProtocol = "bgp"
)

// ServiceReference names a Service.
type ServiceReference struct {
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
}

// ServiceAnnouncementStatus says which node announces which of a Service's
// addresses, and how.
type ServiceAnnouncementStatus struct {
	// Service whose addresses are announced.
	// +optional
	Service ServiceReference `json:"service"`
	// Node doing the announcing.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Node string `json:"node"`
	// Protocol used.
	// +optional
	Protocol AnnouncementProtocol `json:"protocol"`
	// IPs announced.
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	// +optional
	IPs []string `json:"ips,omitempty"`
	// Interfaces answering ARP/NDP (layer2).
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	Interfaces []string `json:"interfaces,omitempty"`
	// Peers the routes were sent to (bgp), as BGPPeer names.
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +optional
	Peers []string `json:"peers,omitempty"`
	// Unannounced are addresses of the Service that no node announces
	// this way, with the reason this speaker computed: written by the
	// node that won an address but cannot announce it (no interface up,
	// isolated), and, for reasons that hold on every node (no eligible
	// node, no advertisement selects the Service, no serving endpoint),
	// by the first live speaker by name. `herald status` prints them.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=ip
	// +optional
	Unannounced []UnannouncedIP `json:"unannounced,omitempty"`
}

// UnannouncedIP is an address that is not announced, and why.
type UnannouncedIP struct {
	// +kubebuilder:validation:MaxLength=45
	IP string `json:"ip"`
	// Reason, as the speakers log it.
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason"`
	// Detail, such as why each node is not eligible.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Detail string `json:"detail,omitempty"`
}

// ServiceAnnouncement is written by the speakers, one per Service per node
// announcing it, so `kubectl get serviceannouncements` shows who announces
// what; one with no IPs only reports addresses nobody announces
// (status.unannounced). Users do not write it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=svcannounce,categories=herald
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.status.service.name`
// +kubebuilder:printcolumn:name="Service Namespace",type=string,JSONPath=`.status.service.namespace`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Protocol",type=string,JSONPath=`.status.protocol`
// +kubebuilder:printcolumn:name="IPs",type=string,JSONPath=`.status.ips`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ServiceAnnouncement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Status ServiceAnnouncementStatus `json:"status,omitempty"`
}

// ServiceAnnouncementList is a list of ServiceAnnouncements.
// +kubebuilder:object:root=true
type ServiceAnnouncementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceAnnouncement `json:"items"`
}
