package speaker

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/herald-lb/herald/config/v1beta1"
	l2plan "github.com/herald-lb/herald/speaker/layer2/plan"
	"github.com/herald-lb/herald/speaker/view"
)

// Labels and the annotation on ServiceAnnouncements. The node is an
// annotation because a node name may be longer than a label value allows;
// the labels are for `kubectl get -l`.
const (
	LabelServiceNamespace = "herald.io/service-namespace"
	LabelServiceName      = "herald.io/service-name"
	LabelNode             = "herald.io/node"
	AnnotationNode        = "herald.io/node"
)

// AnnouncementGVR is the ServiceAnnouncement resource.
var AnnouncementGVR = v1beta1.GroupVersion.WithResource("serviceannouncements")

// AnnouncementName names the layer-2 ServiceAnnouncement of a Service
// announced by a node: readable (service and node, shortened) and
// collision-free across namespaces and nodes (a hash of all three).
func AnnouncementName(svc view.ServiceRef, node string) string {
	return announcementName(svc, node, "")
}

// AnnouncementNameOf names the ServiceAnnouncement of a: layer-2 ones as
// AnnouncementName, others with the protocol in the name and the hash,
// since a node may announce one Service both ways.
func AnnouncementNameOf(a view.Announcement) string {
	if a.Protocol == l2plan.Protocol {
		return AnnouncementName(a.Service, a.Node)
	}
	return announcementName(a.Service, a.Node, a.Protocol)
}

func announcementName(svc view.ServiceRef, node, protocol string) string {
	key := svc.Namespace + "/" + svc.Name + "/" + node
	if protocol != "" {
		key += "/" + protocol
	}
	sum := sha256.Sum256([]byte(key))
	short := func(s string, n int) string {
		s = strings.ReplaceAll(s, ".", "-")
		if len(s) > n {
			s = s[:n]
		}
		return strings.Trim(s, "-")
	}
	// At most 63 characters: 30 + 1 + 20 + 1 + 10, the protocol's room
	// taken from the Service's part.
	svcLen, suffix := 30, ""
	if protocol != "" {
		svcLen, suffix = 30-len(protocol)-1, protocol+"-"
	}
	name := short(svc.Name, svcLen) + "-" + short(node, 20) + "-" + suffix
	return name + hex.EncodeToString(sum[:])[:10]
}

// serviceAnnouncements is the ServiceAnnouncement kind: one object per
// Service (and protocol) this node announces or reports on, owned by the
// Service when owner finds it in herald's namespace.
func serviceAnnouncements(owner func(view.ServiceRef) types.UID) statusKind[view.Announcement] {
	return statusKind[view.Announcement]{
		gvr:  AnnouncementGVR,
		kind: "ServiceAnnouncement",
		ours: func(_ string, u *unstructured.Unstructured, node string) bool { return announcementNode(u) == node },
		watched: func(u *unstructured.Unstructured, node string) bool {
			return u.GetAnnotations()[AnnotationNode] == node
		},
		equal: view.Announcement.Equal,
		object: func(meta metav1.ObjectMeta, want view.Announcement) runtime.Object {
			meta.Labels[LabelServiceNamespace] = want.Service.Namespace
			meta.Labels[LabelServiceName] = want.Service.Name
			if owner != nil {
				if uid := owner(want.Service); uid != "" {
					meta.OwnerReferences = []metav1.OwnerReference{{
						APIVersion: "v1", Kind: "Service", Name: want.Service.Name, UID: uid,
					}}
				}
			}
			return &v1beta1.ServiceAnnouncement{
				TypeMeta:   metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "ServiceAnnouncement"},
				ObjectMeta: meta,
			}
		},
		status: func(a view.Announcement) any { st := desiredStatus(a); return &st },
		same: func(cur *unstructured.Unstructured, status any) (bool, error) {
			var have v1beta1.ServiceAnnouncement
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(cur.Object, &have); err != nil {
				return false, err
			}
			return sameStatus(have.Status, *status.(*v1beta1.ServiceAnnouncementStatus)), nil
		},
	}
}

func desiredStatus(a view.Announcement) v1beta1.ServiceAnnouncementStatus {
	st := v1beta1.ServiceAnnouncementStatus{
		Service:    v1beta1.ServiceReference{Namespace: a.Service.Namespace, Name: a.Service.Name},
		Node:       a.Node,
		Protocol:   v1beta1.AnnouncementProtocol(a.Protocol),
		Interfaces: slices.Clone(a.Interfaces),
		Peers:      slices.Clone(a.Peers),
	}
	for _, ip := range a.IPs {
		st.IPs = append(st.IPs, ip.String())
	}
	for _, u := range a.Unannounced {
		st.Unannounced = append(st.Unannounced, v1beta1.UnannouncedIP{IP: u.Addr.String(), Reason: u.Reason, Detail: u.Detail})
	}
	return st
}

func sameStatus(a, b v1beta1.ServiceAnnouncementStatus) bool {
	return a.Service == b.Service && a.Node == b.Node && a.Protocol == b.Protocol &&
		slices.Equal(a.IPs, b.IPs) && slices.Equal(a.Interfaces, b.Interfaces) && slices.Equal(a.Peers, b.Peers) &&
		slices.Equal(a.Unannounced, b.Unannounced)
}
