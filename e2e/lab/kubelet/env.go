package kubelet

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
)

// DefaultPath is the PATH a container gets unless its env sets one (what
// Debian-based images set).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// objectGetter reads the ConfigMaps and Secrets that env refers to.
type objectGetter interface {
	ConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*v1.Secret, error)
}

// envInput is what a container's environment is computed from.
type envInput struct {
	pod *v1.Pod
	// ips answer the downward API's status fields.
	ips            podAddrs
	nodeResources  v1.ResourceList // node allocatable: the default for unset limits
	serviceEnv     map[string]string
	getter         objectGetter
	defaultEnvPath string
}

// orderedEnv keeps the first-definition order of variables while later
// definitions override values, as a container runtime receives them.
type orderedEnv struct {
	keys []string
	vals map[string]string
}

func (e *orderedEnv) set(k, v string) {
	if e.vals == nil {
		e.vals = map[string]string{}
	}
	if _, ok := e.vals[k]; !ok {
		e.keys = append(e.keys, k)
	}
	e.vals[k] = v
}

func (e *orderedEnv) list() []string {
	out := make([]string, 0, len(e.keys))
	for _, k := range e.keys {
		out = append(out, k+"="+e.vals[k])
	}
	return out
}

// containerEnv computes c's environment like the kubelet: a base (PATH,
// HOSTNAME), the `kubernetes` service variables, envFrom, then env in
// order, each value's $(VAR) references expanded from what came before.
// A reference that cannot be resolved is a CreateContainerConfigError.
func containerEnv(ctx context.Context, in envInput, c *v1.Container) (*orderedEnv, error) {
	pod := in.pod
	env := &orderedEnv{}
	path := in.defaultEnvPath
	if path == "" {
		path = DefaultPath
	}
	env.set("PATH", path)
	host := pod.Name
	if pod.Spec.HostNetwork {
		host = pod.Spec.NodeName
	}
	env.set("HOSTNAME", host)
	keys := make([]string, 0, len(in.serviceEnv))
	for k := range in.serviceEnv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env.set(k, in.serviceEnv[k])
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, err := in.getter.ConfigMap(ctx, pod.Namespace, from.ConfigMapRef.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && isTrue(from.ConfigMapRef.Optional) {
					continue
				}
				return nil, configErr("configmap %q: %v", from.ConfigMapRef.Name, err)
			}
			for _, k := range sortedKeys(cm.Data) {
				env.set(from.Prefix+k, cm.Data[k])
			}
		case from.SecretRef != nil:
			s, err := in.getter.Secret(ctx, pod.Namespace, from.SecretRef.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && isTrue(from.SecretRef.Optional) {
					continue
				}
				return nil, configErr("secret %q: %v", from.SecretRef.Name, err)
			}
			for _, k := range sortedKeys(s.Data) {
				env.set(from.Prefix+k, string(s.Data[k]))
			}
		}
	}

	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env.set(e.Name, Expand(e.Value, env.vals))
			continue
		}
		vf := e.ValueFrom
		switch {
		case vf.FieldRef != nil:
			v, err := fieldValue(pod, in.ips, vf.FieldRef.FieldPath)
			if err != nil {
				return nil, configErr("env %s: %v", e.Name, err)
			}
			env.set(e.Name, v)
		case vf.ResourceFieldRef != nil:
			v, err := resourceValue(c, in.nodeResources, vf.ResourceFieldRef)
			if err != nil {
				return nil, configErr("env %s: %v", e.Name, err)
			}
			env.set(e.Name, v)
		case vf.ConfigMapKeyRef != nil:
			ref := vf.ConfigMapKeyRef
			cm, err := in.getter.ConfigMap(ctx, pod.Namespace, ref.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && isTrue(ref.Optional) {
					continue
				}
				return nil, configErr("env %s: configmap %q: %v", e.Name, ref.Name, err)
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				if isTrue(ref.Optional) {
					continue
				}
				return nil, configErr("env %s: configmap %q has no key %q", e.Name, ref.Name, ref.Key)
			}
			env.set(e.Name, v)
		case vf.SecretKeyRef != nil:
			ref := vf.SecretKeyRef
			s, err := in.getter.Secret(ctx, pod.Namespace, ref.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && isTrue(ref.Optional) {
					continue
				}
				return nil, configErr("env %s: secret %q: %v", e.Name, ref.Name, err)
			}
			v, ok := s.Data[ref.Key]
			if !ok {
				if isTrue(ref.Optional) {
					continue
				}
				return nil, configErr("env %s: secret %q has no key %q", e.Name, ref.Name, ref.Key)
			}
			env.set(e.Name, string(v))
		default:
			return nil, configErr("env %s: this kind of valueFrom is not supported by the lab kubelet", e.Name)
		}
	}
	return env, nil
}

// podAddrs are a pod's addresses and its node's, primary (IPv4) first.
type podAddrs struct {
	pod, host []string
}

// first is the primary address of ips, or "".
func first(ips []string) string {
	if len(ips) == 0 {
		return ""
	}
	return ips[0]
}

// fieldValue resolves a downward-API field path. The plural status
// fields are every address joined with commas, as the kubelet gives them
// (a dual-stack pod's agnhost listens on each: upstream's dual-stack
// tests pass `--udp-listen-addresses=$(HOST_IP),$(POD_IPS)`).
func fieldValue(pod *v1.Pod, ips podAddrs, fieldPath string) (string, error) {
	if k, ok := subscript(fieldPath, "metadata.labels"); ok {
		return pod.Labels[k], nil
	}
	if k, ok := subscript(fieldPath, "metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}
	switch fieldPath {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return first(ips.host), nil
	case "status.hostIPs":
		return strings.Join(ips.host, ","), nil
	case "status.podIP":
		return first(ips.pod), nil
	case "status.podIPs":
		return strings.Join(ips.pod, ","), nil
	}
	return "", fmt.Errorf("field path %q is not supported", fieldPath)
}

// subscript parses `prefix['key']`.
func subscript(path, prefix string) (string, bool) {
	if !strings.HasPrefix(path, prefix+"['") || !strings.HasSuffix(path, "']") {
		return "", false
	}
	return path[len(prefix)+2 : len(path)-2], true
}

// formatMap renders labels or annotations like the downward API's files:
// key="value" lines, sorted.
func formatMap(m map[string]string) string {
	var lines []string
	for _, k := range sortedKeys(m) {
		lines = append(lines, fmt.Sprintf("%s=%q", k, m[k]))
	}
	return strings.Join(lines, "\n")
}

// resourceValue resolves a resourceFieldRef: the container's request or
// limit divided by the divisor and rounded up; an unset limit is the
// node's allocatable amount, an unset request is zero.
func resourceValue(c *v1.Container, node v1.ResourceList, ref *v1.ResourceFieldSelector) (string, error) {
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("resource %q is not supported", ref.Resource)
	}
	res := v1.ResourceName(name)
	var q resource.Quantity
	switch kind {
	case "limits":
		if v, ok := c.Resources.Limits[res]; ok {
			q = v
		} else if v, ok := node[res]; ok {
			q = v
		}
	case "requests":
		if v, ok := c.Resources.Requests[res]; ok {
			q = v
		} else if v, ok := c.Resources.Limits[res]; ok {
			q = v // the API server defaults requests to limits
		}
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if res == v1.ResourceCPU {
		v := math.Ceil(float64(q.MilliValue()) / float64(divisor.MilliValue()))
		return fmt.Sprint(int64(v)), nil
	}
	v := math.Ceil(float64(q.Value()) / float64(divisor.Value()))
	return fmt.Sprint(int64(v)), nil
}

func isTrue(b *bool) bool { return b != nil && *b }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// configErr is a mistake in the pod's spec: the container waits with
// CreateContainerConfigError until the spec or what it refers to changes.
func configErr(format string, args ...any) error {
	return &containerError{Reason: ReasonCreateContainerConfigError, Message: fmt.Sprintf(format, args...)}
}
