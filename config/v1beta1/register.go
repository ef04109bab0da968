package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of every type in this package.
var GroupVersion = schema.GroupVersion{Group: "herald.io", Version: "v1beta1"}

// AddToScheme registers the herald.io/v1beta1 types with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&IPAddressPool{}, &IPAddressPoolList{},
		&L2Advertisement{}, &L2AdvertisementList{},
		&BGPAdvertisement{}, &BGPAdvertisementList{},
		&BGPPeer{}, &BGPPeerList{},
		&Community{}, &CommunityList{},
		&BFDProfile{}, &BFDProfileList{},
		&ServiceAnnouncement{}, &ServiceAnnouncementList{},
		&NodeAnnouncement{}, &NodeAnnouncementList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
