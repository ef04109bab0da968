// Package v1beta1 holds the herald.io/v1beta1 API: the custom resources users
// write to configure herald (IPAddressPool, L2Advertisement, BGPAdvertisement,
// BGPPeer, Community, BFDProfile) and the ServiceAnnouncement status object the
// speakers publish.
//
// Every rule that can be checked on one object alone is also enforced by the
// generated CRD schema (OpenAPI bounds and CEL rules), so the API server
// rejects such mistakes at apply time. The config package re-checks all of it,
// plus everything that spans objects, because objects can also arrive from
// files (herald validate) or from clusters installed with an older schema.
//
// +kubebuilder:object:generate=true
// +groupName=herald.io
package v1beta1
