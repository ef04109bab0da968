package speaker

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/herald-lb/herald/config/v1beta1"
	"github.com/herald-lb/herald/speaker/view"
)

// NodeAnnouncementGVR is the NodeAnnouncement resource.
var NodeAnnouncementGVR = v1beta1.GroupVersion.WithResource("nodeannouncements")

// nodeAnnouncements is the NodeAnnouncement kind: one object named after
// the node, as the BGP plan last summed it up.
//
// Its informer is not one the speaker waits for: a cluster upgraded
// without the new CRD (Helm does not upgrade crds/) keeps announcing, and
// only this status is missing, with a warning in the log.
var nodeAnnouncements = statusKind[view.NodeSummary]{
	gvr:     NodeAnnouncementGVR,
	kind:    "NodeAnnouncement",
	ours:    func(name string, _ *unstructured.Unstructured, node string) bool { return name == node },
	watched: func(u *unstructured.Unstructured, node string) bool { return u.GetName() == node },
	equal:   view.NodeSummary.Equal,
	object: func(meta metav1.ObjectMeta, _ view.NodeSummary) runtime.Object {
		return &v1beta1.NodeAnnouncement{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "NodeAnnouncement"},
			ObjectMeta: meta,
		}
	},
	status: func(s view.NodeSummary) any { st := nodeStatus(s); return &st },
	same: func(cur *unstructured.Unstructured, status any) (bool, error) {
		var have v1beta1.NodeAnnouncement
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(cur.Object, &have); err != nil {
			return false, err
		}
		return sameNodeStatus(have.Status, *status.(*v1beta1.NodeAnnouncementStatus)), nil
	},
	optional: "NodeAnnouncements cannot be read yet: this node's BGP status for Services with externalTrafficPolicy Cluster is not published (the announcing goes on). Is the nodeannouncements.herald.io CRD installed (Helm does not upgrade crds/: kubectl apply --server-side -f charts/herald/crds/) and may the speaker's ServiceAccount read it?",
}

func nodeStatus(s view.NodeSummary) v1beta1.NodeAnnouncementStatus {
	st := v1beta1.NodeAnnouncementStatus{Node: s.Node, Protocol: v1beta1.AnnouncementProtocol(s.Protocol), Reason: s.Reason}
	for _, a := range s.Advertisements {
		st.Advertisements = append(st.Advertisements, v1beta1.NodeAdvertisement{
			Name: a.Name, IPv4Peers: slices.Clone(a.IPv4Peers), IPv6Peers: slices.Clone(a.IPv6Peers),
		})
	}
	return st
}

func sameNodeStatus(a, b v1beta1.NodeAnnouncementStatus) bool {
	return a.Node == b.Node && a.Protocol == b.Protocol && a.Reason == b.Reason &&
		slices.EqualFunc(a.Advertisements, b.Advertisements, func(x, y v1beta1.NodeAdvertisement) bool {
			return x.Name == y.Name && slices.Equal(x.IPv4Peers, y.IPv4Peers) && slices.Equal(x.IPv6Peers, y.IPv6Peers)
		})
}
