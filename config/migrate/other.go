package migrate

import (
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// MetalLB configuration herald has no counterpart for. It is reported by
// name, never skipped as if it were not configuration.
const (
	// otherGroupFRRK8s is frr-k8s's group: FRRConfiguration, raw BGP
	// configuration MetalLB's frr-k8s mode merges with its own.
	otherGroupFRRK8s = "frrk8s.metallb.io"
	// oldAnnotationGroup prefixed MetalLB's Service annotations; no
	// MetalLB serves configuration objects in it.
	oldAnnotationGroup = "metallb.universe.tf"
	// excludeL2ConfigMap lists interfaces MetalLB's speakers do not
	// announce layer 2 addresses on.
	excludeL2ConfigMap = "metallb-excludel2"
	// bgpExtrasConfigMap holds raw FRR configuration MetalLB's FRR mode
	// appends to its own.
	bgpExtrasConfigMap = "bgpextras"
)

// notTranslated reports a whole piece of MetalLB configuration that
// herald has no counterpart for.
func (t *Translator) notTranslated(o *object, why string) {
	t.res.Found++
	o.errorf("", "not translated: %s", why)
}

func frrK8sReason(kind string) string {
	if kind == "FRRConfiguration" {
		return "raw BGP configuration for frr-k8s, which MetalLB's frr-k8s mode merges with its own; herald's speakers do not run FRR: carry its neighbours and prefixes over as BGPPeers and BGPAdvertisements by hand"
	}
	return fmt.Sprintf("%s is frr-k8s's, which herald's speakers do not run", kind)
}

// defaultExcludeL2 is the list MetalLB's manifests and chart install in
// the metallb-excludel2 ConfigMap.
var defaultExcludeL2 = []string{
	"^docker.*", "^cbr.*", "^dummy.*", "^virbr.*", "^lxcbr.*", "^veth.*", "^lo$", "^cali.*",
	"^tunl.*", "^flannel.*", "^kube-ipvs.*", "^cni.*", "^nodelocaldns.*", "^lxc.*",
}

// heraldInterfaceRule is how herald's speakers choose interfaces, which
// stands in for MetalLB's exclusion list.
const heraldInterfaceRule = "herald has no exclusion list: its speakers never answer on loopback, NOARP, non-Ethernet or enslaved interfaces, nor on pod-network ones (an address in the node's pod CIDRs, or a CNI name such as cni*, cbr*, docker*, cali*, flannel*, lxc*, tunl*, kube-ipvs*, nodelocaldns*); to keep them off any other interface, name the interfaces to announce on in L2Advertisement spec.interfaces"

// excludeL2 reports MetalLB's list of interfaces not to announce on: as
// MetalLB installs it, herald's own choice covers it (noted); changed,
// the entries MetalLB did not ship are named.
func (o *object) excludeL2(data map[string]any) {
	text, ok := data["excludel2.yaml"].(string)
	var list struct {
		Patterns []string `json:"announcedInterfacesToExclude"`
	}
	if !ok {
		o.t.res.Found++
		o.warnf("data", "has no excludel2.yaml key, so MetalLB used its built-in list; not translated: %s", heraldInterfaceRule)
		return
	}
	if err := yaml.UnmarshalStrict([]byte(text), &list); err != nil {
		o.t.res.Found++
		o.warnf("data.excludel2.yaml", "cannot be read: %s; not translated: %s", legacyError(err), heraldInterfaceRule)
		return
	}
	var added []string
	for _, p := range list.Patterns {
		if !slices.Contains(defaultExcludeL2, p) {
			added = append(added, p)
		}
	}
	if len(added) == 0 {
		// Part of MetalLB's installation rather than configuration:
		// not counted as found.
		o.notef("data.excludel2.yaml", "not translated, as MetalLB installs it (or a part of it): %s", heraldInterfaceRule)
		return
	}
	o.t.res.Found++
	o.warnf("data.excludel2.yaml", "not translated, and it excludes %s beyond what MetalLB installs: %s", strings.Join(added, ", "), heraldInterfaceRule)
}
