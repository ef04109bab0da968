package kubelet

import (
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Setpriv is util-linux's setpriv, which the kubelet puts in front of a
// container's program to give it the container's capabilities.
const Setpriv = "/usr/bin/setpriv"

// runtimeDefaultCaps are the capabilities containerd and CRI-O give a
// container that is not privileged and adds or drops nothing.
var runtimeDefaultCaps = []string{
	"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}

// capabilities is the set of capabilities a container runs with, as a
// container runtime computes it from the securityContext: the runtime's
// default set, less what it drops (ALL: everything), plus what it adds.
// all is true when the container keeps every capability (privileged, or
// ALL added): the kubelet then starts it as it is.
func capabilities(sc *v1.SecurityContext) (caps []string, all bool) {
	if sc != nil && sc.Privileged != nil && *sc.Privileged {
		return nil, true
	}
	set := slices.Clone(runtimeDefaultCaps)
	if sc != nil && sc.Capabilities != nil {
		for _, d := range sc.Capabilities.Drop {
			name := capName(d)
			if name == "ALL" {
				set = nil
				break
			}
			set = slices.DeleteFunc(set, func(c string) bool { return c == name })
		}
		for _, a := range sc.Capabilities.Add {
			name := capName(a)
			if name == "ALL" {
				return nil, true
			}
			if !slices.Contains(set, name) {
				set = append(set, name)
			}
		}
	}
	slices.Sort(set)
	return set, false
}

// capName is "NET_RAW" for "NET_RAW", "net_raw" and "CAP_NET_RAW".
func capName(c v1.Capability) string {
	return strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_")
}

// withCapabilities runs program through setpriv with only caps in the
// bounding set: a root process then has exactly those after its exec, as
// in a container.
func withCapabilities(caps []string, program string, args []string) (string, []string) {
	spec := "-all"
	for _, c := range caps {
		spec += ",+" + strings.ToLower(c)
	}
	return Setpriv, append([]string{"--bounding-set=" + spec, "--", program}, args...)
}
