package v1beta1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// DynamicASNMode accepts a peer's AS number from its OPEN message instead of
// configuring it: "internal" expects the peer in our own AS, "external" in
// any other.
// +kubebuilder:validation:Enum=internal;external
type DynamicASNMode string

const (
	DynamicASNInternal DynamicASNMode = "internal"
	DynamicASNExternal DynamicASNMode = "external"
)

// SecretKeyRef points at a key of a Secret in the BGPPeer's own namespace.
type SecretKeyRef struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key in the Secret's data holding the password.
	// +kubebuilder:default=password
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// The rules relating several fields sit on BGPPeerSpec but report the field to
// change (fieldPath), so that kubectl names it.

// BGPPeerSpec describes one BGP session each selected node opens.
// +kubebuilder:validation:XValidation:rule="has(self.peerASN) || has(self.dynamicASN)",message="one of peerASN and dynamicASN must be set",fieldPath=".peerASN"
// +kubebuilder:validation:XValidation:rule="!has(self.peerASN) || !has(self.dynamicASN)",message="peerASN and dynamicASN are mutually exclusive",fieldPath=".dynamicASN"
// +kubebuilder:validation:XValidation:rule="!(has(self.password) && has(self.passwordSecret))",message="password and passwordSecret are mutually exclusive",fieldPath=".passwordSecret"
// +kubebuilder:validation:XValidation:rule="!has(self.sourceAddress) || !isIP(self.sourceAddress) || !isIP(self.peerAddress) || ip(self.sourceAddress).family() == ip(self.peerAddress).family()",message="sourceAddress must be of the same IP family as peerAddress",fieldPath=".sourceAddress"
// +kubebuilder:validation:XValidation:rule="!has(self.ebgpMultiHop) || !self.ebgpMultiHop || (has(self.peerASN) ? self.peerASN != self.myASN : !has(self.dynamicASN) || self.dynamicASN != 'internal')",message="ebgpMultiHop applies to eBGP sessions only; this peer is in the same AS as myASN",fieldPath=".ebgpMultiHop"
// +kubebuilder:validation:XValidation:rule="!has(self.keepaliveTime) || !self.keepaliveTime.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (has(self.holdTime) && !self.holdTime.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')) || duration(self.keepaliveTime) <= (has(self.holdTime) ? duration(self.holdTime) : duration('90s'))",message="keepaliveTime must not be longer than holdTime (90s when unset)",fieldPath=".keepaliveTime"
type BGPPeerSpec struct {
	// controller-gen declares uint32 fields as format int32; the AS number
	// fields say int64 so that clients do not refuse four-byte AS numbers.

	// MyASN is the AS number the node speaks for.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	MyASN uint32 `json:"myASN"`

	// PeerASN is the AS number expected from the peer.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	// +optional
	PeerASN uint32 `json:"peerASN,omitempty"`

	// DynamicASN, instead of peerASN, accepts the AS number the peer sends.
	// +optional
	DynamicASN DynamicASNMode `json:"dynamicASN,omitempty"`

	// PeerAddress is the router's address.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IPv4 or IPv6 address"
	PeerAddress string `json:"peerAddress"`

	// SourceAddress is the local address of the session; by default the
	// kernel picks it from the route towards the peer.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IPv4 or IPv6 address"
	// +optional
	SourceAddress string `json:"sourceAddress,omitempty"`

	// PeerPort is the peer's TCP port.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:default=179
	// +optional
	PeerPort *int32 `json:"peerPort,omitempty"`

	// HoldTime is the BGP hold time proposed to the peer, in whole seconds
	// (BGP carries it as a 16-bit count of seconds): 3s to 65535s. The API
	// admits 0s (no keepalives), which herald's speaker refuses: the
	// BGPPeer is then marked invalid. Default 90s.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(h|m|s))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+(h|m|s))+$') || duration(self) == duration('0s') || (duration(self) >= duration('3s') && duration(self) <= duration('65535s'))",message="holdTime must be 0s (no keepalives) or between 3s and 65535s"
	// +optional
	HoldTime *metav1.Duration `json:"holdTime,omitempty"`

	// KeepaliveTime is the interval between keepalives, in whole seconds;
	// default a third of holdTime, rounded down.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(h|m|s))+$`
	// +optional
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`

	// ConnectTime is how long to wait between connection attempts.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('65535s'))",message="connectTime must be between 1s and 65535s"
	// +optional
	ConnectTime *metav1.Duration `json:"connectTime,omitempty"`

	// RouterID overrides the BGP router ID (an IPv4 address); by default
	// the node's IPv4 address.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address"
	// +optional
	RouterID string `json:"routerID,omitempty"`

	// NodeSelectors limit the nodes that open this session; empty means all.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`

	// Password for TCP MD5 authentication, in clear text. Prefer
	// passwordSecret.
	// +kubebuilder:validation:MaxLength=80
	// +optional
	Password string `json:"password,omitempty"`

	// PasswordSecret names a Secret in this namespace holding the TCP MD5
	// password.
	// +optional
	PasswordSecret *SecretKeyRef `json:"passwordSecret,omitempty"`

	// EBGPMultiHop allows an eBGP peer that is not directly connected.
	// +optional
	EBGPMultiHop bool `json:"ebgpMultiHop,omitempty"`

	// EnableGracefulRestart keeps routes at the peer while the speaker
	// restarts (RFC 4724).
	// +optional
	EnableGracefulRestart bool `json:"enableGracefulRestart,omitempty"`

	// BFDProfile names a BFDProfile; when set the session is tracked by BFD.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	BFDProfile string `json:"bfdProfile,omitempty"`
}

// BGPPeer is a router the speakers peer with.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bgppeer,categories=herald
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.peerAddress`
// +kubebuilder:printcolumn:name="My ASN",type=integer,JSONPath=`.spec.myASN`
// +kubebuilder:printcolumn:name="Peer ASN",type=integer,JSONPath=`.spec.peerASN`
// +kubebuilder:printcolumn:name="BFD Profile",type=string,JSONPath=`.spec.bfdProfile`,priority=10
// +kubebuilder:printcolumn:name="Valid",type=string,JSONPath=`.status.conditions[?(@.type=="Valid")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BGPPeer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec BGPPeerSpec `json:"spec"`
	// +optional
	Status ConfigStatus `json:"status,omitempty"`
}

// BGPPeerList is a list of BGPPeers.
// +kubebuilder:object:root=true
type BGPPeerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPPeer `json:"items"`
}

// BFDProfileSpec holds BFD session parameters (RFC 5880). Unset fields take
// the BFD daemon's defaults (300 ms intervals, multiplier 3). herald's
// speakers run GoBGP's BFD: single-hop sessions of control packets, which
// they always start themselves. The echo, passive and minimum-TTL fields
// are MetalLB's, kept so that its profiles apply as they are; setting them
// has no effect, and the profile's Valid condition says so.
type BFDProfileSpec struct {
	// ReceiveInterval is the minimum interval, in milliseconds, at which
	// this node can receive control packets.
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=60000
	// +optional
	ReceiveInterval *uint32 `json:"receiveInterval,omitempty"`

	// TransmitInterval is the minimum interval, in milliseconds, at which
	// this node sends control packets.
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=60000
	// +optional
	TransmitInterval *uint32 `json:"transmitInterval,omitempty"`

	// DetectMultiplier is how many missed packets declare the session down.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=255
	// +optional
	DetectMultiplier *uint32 `json:"detectMultiplier,omitempty"`

	// EchoInterval is the minimum echo transmit interval in milliseconds.
	// No effect: herald's BFD has no echo function.
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=60000
	// +optional
	EchoInterval *uint32 `json:"echoInterval,omitempty"`

	// EchoMode turns on echo packets. No effect when true: herald's BFD
	// has no echo function.
	// +optional
	EchoMode *bool `json:"echoMode,omitempty"`

	// PassiveMode waits for the peer to start the session. No effect when
	// true: herald's speakers always start it.
	// +optional
	PassiveMode *bool `json:"passiveMode,omitempty"`

	// MinimumTTL is the lowest TTL accepted on multi-hop sessions. No
	// effect: herald's BFD sessions are single-hop, sent with TTL 255, and
	// the TTL of what they receive is not checked.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=254
	// +optional
	MinimumTTL *uint32 `json:"minimumTtl,omitempty"`
}

// BFDProfile is a named set of BFD parameters BGPPeers refer to.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=herald
// +kubebuilder:printcolumn:name="Receive",type=integer,JSONPath=`.spec.receiveInterval`
// +kubebuilder:printcolumn:name="Transmit",type=integer,JSONPath=`.spec.transmitInterval`
// +kubebuilder:printcolumn:name="Multiplier",type=integer,JSONPath=`.spec.detectMultiplier`
// +kubebuilder:printcolumn:name="Valid",type=string,JSONPath=`.status.conditions[?(@.type=="Valid")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BFDProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec BFDProfileSpec `json:"spec,omitempty"`
	// +optional
	Status ConfigStatus `json:"status,omitempty"`
}

// BFDProfileList is a list of BFDProfiles.
// +kubebuilder:object:root=true
type BFDProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BFDProfile `json:"items"`
}
