package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// KubeSystem is where kubeadm runs kube-proxy (pods labelled
// KubeProxyPodLabels), and where a lab with Options.HeraldNamespace set
// to it runs herald.
const KubeSystem = "kube-system"

// KubeProxyPodLabels are the labels of kubeadm's kube-proxy pods. In a
// lab with herald's proxy and herald in kube-system, the speakers' pods
// (which run the proxy) carry them too, so whatever looks there for the
// node's proxy pods (upstream's "should work after restarting
// kube-proxy" deletes them) finds herald's.
var KubeProxyPodLabels = map[string]string{"k8s-app": "kube-proxy"}

// heraldNamespace is the lab's herald namespace: ns, else the one the
// install manifests name.
func heraldNamespace(ns string) string {
	if ns == "" {
		return HeraldNamespace
	}
	return ns
}

// HeraldNS is the namespace herald runs in (and its configuration lives
// in) in the lab s.
func (s State) HeraldNS() string { return heraldNamespace(s.HeraldNamespace) }

// checkHeraldNamespace refuses what the lab cannot do with herald in
// another namespace than its manifests' own.
func checkHeraldNamespace(ns, proxy string, bare bool) error {
	if ns == "" || ns == HeraldNamespace {
		return nil
	}
	if proxy != ProxyHerald || bare {
		return fmt.Errorf("herald's namespace %q: only a lab with herald's proxy installs herald elsewhere than %s", ns, HeraldNamespace)
	}
	if ns != KubeSystem {
		return fmt.Errorf("herald's namespace %q: the lab installs herald in %s or %s", ns, HeraldNamespace, KubeSystem)
	}
	return nil
}

// speakerPodLabels are the labels a lab adds to the speakers' pods in
// namespace ns: kube-proxy's in kube-system, none elsewhere.
func speakerPodLabels(ns string) map[string]string {
	if ns == KubeSystem {
		return KubeProxyPodLabels
	}
	return nil
}

// MoveManifest rewrites herald's install manifests (YAML documents) for
// namespace to instead of from: the Namespace object is renamed (left
// out for kube-system, which is there already), every
// object of from and every (Cluster)RoleBinding subject in it moves, and
// the speakers' pod template gains podLabels. A document that still
// names from afterwards is an error naming it, so a manifest that
// refers to the namespace in a place this does not know is never
// applied half moved.
func MoveManifest(manifest []byte, from, to string, podLabels map[string]string) ([]byte, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var out bytes.Buffer
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading the manifests: %w", err)
		}
		if len(obj) == 0 {
			continue
		}
		kind, _ := obj["kind"].(string)
		meta, _ := obj["metadata"].(map[string]any)
		if meta == nil {
			return nil, fmt.Errorf("a %s without metadata in the manifests", kind)
		}
		name, _ := meta["name"].(string)
		switch {
		case kind == "Namespace" && name == from && to == KubeSystem:
			// Every cluster has it; applying herald's Namespace object
			// there would put herald's labels on it, and deleting the
			// moved manifests would delete it.
			continue
		case kind == "Namespace" && name == from:
			meta["name"] = to
		case meta["namespace"] == from:
			meta["namespace"] = to
		}
		if kind == "RoleBinding" || kind == "ClusterRoleBinding" {
			subjects, _ := obj["subjects"].([]any)
			for _, s := range subjects {
				if sm, ok := s.(map[string]any); ok && sm["namespace"] == from {
					sm["namespace"] = to
				}
			}
		}
		if kind == "DaemonSet" && name == HeraldSpeaker && len(podLabels) > 0 {
			if err := addTemplateLabels(obj, podLabels); err != nil {
				return nil, fmt.Errorf("DaemonSet %s: %w", name, err)
			}
		}
		doc, err := yaml.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", kind, name, err)
		}
		if strings.Contains(string(doc), from) {
			return nil, fmt.Errorf("%s %s still names %s after the move: a field this does not know refers to the namespace", kind, name, from)
		}
		out.WriteString("---\n")
		out.Write(doc)
	}
	return out.Bytes(), nil
}

// addTemplateLabels adds labels to a workload's pod template.
func addTemplateLabels(obj map[string]any, labels map[string]string) error {
	spec, _ := obj["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	if tmpl == nil {
		return errors.New("no spec.template")
	}
	meta, _ := tmpl["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		tmpl["metadata"] = meta
	}
	have, _ := meta["labels"].(map[string]any)
	if have == nil {
		have = map[string]any{}
		meta["labels"] = have
	}
	for k, v := range labels {
		if old, ok := have[k]; ok && old != v {
			return fmt.Errorf("spec.template.metadata.labels[%s] is %v already, not %s", k, old, v)
		}
		have[k] = v
	}
	return nil
}
