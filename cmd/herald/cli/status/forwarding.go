package status

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/herald-lb/herald/proxy"
)

// dsrProblemMark is how a proxy's ProxyInvalidService Event about a
// Service's direct server return begins (rules.Problem's wording).
const dsrProblemMark = "forwarding: dsr: "

// DSRProblems reads, for each Service of svcs that asks for direct server
// return, the proxies' Events about it (a node keeps SNAT forwarding for
// it, or leaves endpoints out, and why): "node: reason (age)", newest
// first, one per node. Events live
// an hour, so a reason may outlast its cause; the age says how old it is.
func DSRProblems(ctx context.Context, kube kubernetes.Interface, svcs []corev1.Service, now time.Time) (map[string][]string, error) {
	out := map[string][]string{}
	for _, s := range svcs {
		if !strings.EqualFold(strings.TrimSpace(s.Annotations[proxy.AnnotationForwarding]), "dsr") {
			continue
		}
		sel := fields.Set{"involvedObject.kind": "Service", "involvedObject.name": s.Name, "reason": "ProxyInvalidService"}.AsSelector().String()
		l, err := kube.CoreV1().Events(s.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return nil, fmt.Errorf("listing the Events of service %s/%s: %w", s.Namespace, s.Name, err)
		}
		out[s.Namespace+"/"+s.Name] = dsrNotes(l.Items, now)
	}
	return out, nil
}

// dsrNotes keeps the newest DSR problem of each node.
func dsrNotes(events []corev1.Event, now time.Time) []string {
	slices.SortFunc(events, func(a, b corev1.Event) int { return eventTime(b).Compare(eventTime(a)) })
	seen := map[string]bool{}
	var notes []string
	for _, e := range events {
		i := strings.Index(e.Message, dsrProblemMark)
		node := e.Source.Host
		if i < 0 || seen[node] {
			continue
		}
		seen[node] = true
		msg := e.Message[i+len(dsrProblemMark):]
		notes = append(notes, fmt.Sprintf("%s: %s (%s ago)", cmpOr(node, "a node"), msg, now.Sub(eventTime(e)).Round(time.Second)))
	}
	return notes
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
