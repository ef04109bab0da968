package harness

import (
	"context"
	"regexp"
	"sort"
	"strings"

	"github.com/herald-lb/herald/e2e/lab/netns"
)

// SaveTools are the iptables backends a node may hold rules in.
var SaveTools = []string{"iptables-legacy-save", "iptables-nft-save", "ip6tables-legacy-save", "ip6tables-nft-save"}

var counters = regexp.MustCompile(` \[\d+:\d+\]$`)

// ForeignRules are the node's iptables rules and chains that are not
// herald's (kubelet's, the CNI plugins', the kernel's defaults), in every
// backend and table, without counters: what installing and removing
// herald must leave as it found it.
func ForeignRules(ctx context.Context, ns string) []string {
	var out []string
	for _, tool := range SaveTools {
		for _, table := range []string{"nat", "filter", "mangle", "raw"} {
			save, err := netns.Run(ctx, ns, tool, "-t", table)
			if err != nil {
				continue // a backend or table the node does not have
			}
			for _, l := range strings.Split(save, "\n") {
				if l == "" || strings.HasPrefix(l, "#") || l == "COMMIT" || strings.Contains(l, "HERALD") {
					continue
				}
				out = append(out, tool+" "+table+": "+counters.ReplaceAllString(l, ""))
			}
		}
	}
	sort.Strings(out)
	return out
}

// DiffRules reports what differs between two ForeignRules snapshots.
func DiffRules(before, after []string) (gone, added []string) {
	in := func(list []string) map[string]bool {
		m := map[string]bool{}
		for _, l := range list {
			m[l] = true
		}
		return m
	}
	b, a := in(before), in(after)
	for _, l := range before {
		if !a[l] {
			gone = append(gone, l)
		}
	}
	for _, l := range after {
		if !b[l] {
			added = append(added, l)
		}
	}
	return gone, added
}
