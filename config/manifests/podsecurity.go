package manifests

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/herald-lb/herald/internal/podsecurity"
)

// levels from the most restricted: the least level a pod needs is the
// first that admits it.
var levels = []podsecurity.Level{podsecurity.Restricted, podsecurity.Baseline, podsecurity.Privileged}

var evaluator = func() policy.Evaluator {
	e, err := policy.NewEvaluator(policy.DefaultChecks())
	if err != nil {
		panic(err)
	}
	return e
}()

// PodSecurity is what Pod Security admission (the checks of
// k8s.io/pod-security-admission, latest version) says of one pod
// template.
type PodSecurity struct {
	// Level is the most restricted level that admits the pod.
	Level podsecurity.Level
	// Refused is, for each stricter level, why it refuses the pod, as the
	// API server's error says it ("host namespaces (hostNetwork=true),
	// ...").
	Refused map[podsecurity.Level]string
}

// EvaluatePodSecurity evaluates a Deployment's, DaemonSet's or Job's pod
// template as Pod Security admission evaluates the pods made from it: the
// API server first defaults a host-network pod's hostPorts to its
// containerPorts, and the baseline level refuses host ports, so that is
// done here too.
func EvaluatePodSecurity(obj kruntime.Object) (PodSecurity, error) {
	var tmpl corev1.PodTemplateSpec
	switch w := obj.(type) {
	case *appsv1.Deployment:
		tmpl = w.Spec.Template
	case *appsv1.DaemonSet:
		tmpl = w.Spec.Template
	case *batchv1.Job:
		tmpl = w.Spec.Template
	default:
		return PodSecurity{}, fmt.Errorf("%T is not a Deployment, DaemonSet or Job", obj)
	}
	meta, spec := tmpl.ObjectMeta.DeepCopy(), tmpl.Spec.DeepCopy()
	if spec.HostNetwork {
		for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for i := range cs {
				for j := range cs[i].Ports {
					if p := &cs[i].Ports[j]; p.HostPort == 0 {
						p.HostPort = p.ContainerPort
					}
				}
			}
		}
	}
	out := PodSecurity{Refused: map[podsecurity.Level]string{}}
	for _, l := range levels {
		res := policy.AggregateCheckResults(evaluator.EvaluatePod(psaapi.LevelVersion{Level: psaapi.Level(l), Version: psaapi.LatestVersion()}, meta, spec))
		if res.Allowed {
			out.Level = l
			return out, nil
		}
		out.Refused[l] = res.ForbiddenDetail()
	}
	return out, fmt.Errorf("no Pod Security level admits the pod: %v", out.Refused)
}

// LeastPodSecurity is the most restricted level that admits the pods of
// every workload (Deployments, DaemonSets) of a set of manifests: what
// their namespace's Pod Security labels must allow.
func LeastPodSecurity(objs []Object) (podsecurity.Level, error) {
	least := podsecurity.Restricted
	for name, w := range Workloads(objs) {
		ps, err := EvaluatePodSecurity(w)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		if rank(ps.Level) > rank(least) {
			least = ps.Level
		}
	}
	return least, nil
}

func rank(l podsecurity.Level) int {
	for i, x := range levels {
		if x == l {
			return i
		}
	}
	return len(levels)
}
