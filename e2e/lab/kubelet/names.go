package kubelet

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// MaxNetnsName bounds a pod namespace's name, so `ip netns list` stays
// readable (the kernel allows file names of 255 bytes).
const MaxNetnsName = 60

// PodNetnsName is the network namespace of a pod:
// <prefix>-pod-<namespace>-<name>. A longer name is cut and ends in 8 hex
// digits of a hash of the full name, so distinct pods keep distinct names.
// Pod and namespace names are DNS labels/subdomains, which are valid file
// names.
func PodNetnsName(prefix, namespace, name string) string {
	full := prefix + "-pod-" + namespace + "-" + name
	if len(full) <= MaxNetnsName {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	h := hex.EncodeToString(sum[:4])
	cut := strings.TrimRight(full[:MaxNetnsName-len(h)-1], "-.")
	return cut + "-" + h
}

// HostVethName is the node-side end of a pod's veth, inside the node's
// namespace: "veth" and 8 hex digits of the pod's UID (interface names
// are at most 15 bytes).
func HostVethName(uid types.UID) string {
	sum := sha256.Sum256([]byte(uid))
	return "veth" + hex.EncodeToString(sum[:4])
}
