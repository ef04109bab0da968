package rules

import (
	"crypto/sha256"
	"encoding/base32"
	"slices"
	"strings"
)

// Chain names. They mirror kube-proxy's KUBE-* layout with our prefix so the
// Kubernetes debugging docs translate one to one.
const (
	ChainServices         = "HERALD-SERVICES"          // nat and filter
	ChainExternalServices = "HERALD-EXTERNAL-SERVICES" // filter
	ChainNodePorts        = "HERALD-NODEPORTS"         // nat and filter (health check ports)
	ChainPostrouting      = "HERALD-POSTROUTING"       // nat
	ChainMarkMasq         = "HERALD-MARK-MASQ"         // nat
	ChainForward          = "HERALD-FORWARD"           // filter
	ChainProxyFirewall    = "HERALD-PROXY-FIREWALL"    // filter

	// CanaryChain is created empty in each of CanaryTables by the syncer; when
	// it disappears someone flushed the tables and a full resync is due.
	CanaryChain = "HERALD-PROXY-CANARY"

	// Per-service and per-endpoint chain prefixes. Each is followed by 16
	// base32 characters, keeping names within iptables' 28-character limit.
	PrefixService  = "HERALD-SVC-" // Cluster-policy endpoints
	PrefixLocal    = "HERALD-SVL-" // Local-policy endpoints (kube-proxy's old XLB)
	PrefixExternal = "HERALD-EXT-" // external destinations: policy and short-circuits
	PrefixFirewall = "HERALD-FW-"  // loadBalancerSourceRanges
	PrefixEndpoint = "HERALD-SEP-" // one endpoint: hairpin mark + DNAT
)

// CanaryTables are the tables the canary chain lives in.
var CanaryTables = []string{"mangle", "nat", "filter"}

// IsServiceChain reports whether a chain is a per-service or per-endpoint
// chain that Render may create and later delete as stale.
func IsServiceChain(chain string) bool {
	for _, p := range []string{PrefixService, PrefixLocal, PrefixExternal, PrefixFirewall, PrefixEndpoint} {
		if strings.HasPrefix(chain, p) {
			return true
		}
	}
	return false
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// hash16 gives a stable 16-character name suffix. Stability across restarts
// and versions matters: partial syncs and `-m recent` affinity lists refer
// to chains by these names.
func hash16(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	var sum [sha256.Size]byte
	return b32.EncodeToString(h.Sum(sum[:0]))[:16]
}

// serviceHash is shared by a port's SVC, SVL, EXT and FW chains, so they can
// be matched up by eye.
func serviceHash(portName, proto string) string { return hash16(portName, proto) }

func endpointChain(portName, proto, endpoint string) string {
	return PrefixEndpoint + hash16(portName, proto, endpoint)
}

// ChainSuffix returns the hash suffix of a Service port's SVC/SVL/EXT/FW
// chains, e.g. to find them in iptables-save output.
func ChainSuffix(n ServicePortName, p Protocol) string { return serviceHash(n.String(), p.lower()) }

// Jump is a rule in a built-in chain that sends packets into herald's
// chains. These are not part of the restore text (which is applied with
// --noflush and must not touch built-in chains); the syncer ensures them.
type Jump struct {
	Table   string   // "nat" or "filter"
	Chain   string   // built-in chain
	Comment string   // comment on the rule
	Extra   []string // extra match arguments
	Target  string   // herald chain
}

// Args returns the rule's arguments as go-iptables expects them (unquoted).
func (j Jump) Args() []string {
	a := []string{"-m", "comment", "--comment", j.Comment}
	a = append(a, j.Extra...)
	return append(a, "-j", j.Target)
}

var ctNew = []string{"-m", "conntrack", "--ctstate", "NEW"}

// Jumps lists the hooks in the order they must appear at the top of each
// built-in chain (so a syncer that prepends must insert them in reverse).
// The filter hooks for new connections only see packets that nat did not
// DNAT away, which is how REJECT/DROP for missing endpoints work.
func Jumps() []Jump {
	return []Jump{
		{"filter", "INPUT", "herald load balancer firewall", ctNew, ChainProxyFirewall},
		{"filter", "INPUT", "herald health check service ports", nil, ChainNodePorts},
		{"filter", "INPUT", "herald externally-visible service portals", ctNew, ChainExternalServices},
		{"filter", "FORWARD", "herald load balancer firewall", ctNew, ChainProxyFirewall},
		{"filter", "FORWARD", "herald forwarding rules", nil, ChainForward},
		{"filter", "FORWARD", "herald service portals", ctNew, ChainServices},
		{"filter", "FORWARD", "herald externally-visible service portals", ctNew, ChainExternalServices},
		{"filter", "OUTPUT", "herald load balancer firewall", ctNew, ChainProxyFirewall},
		{"filter", "OUTPUT", "herald service portals", ctNew, ChainServices},
		{"nat", "PREROUTING", "herald service portals", nil, ChainServices},
		{"nat", "OUTPUT", "herald service portals", nil, ChainServices},
		{"nat", "POSTROUTING", "herald postrouting rules", nil, ChainPostrouting},
	}
}

// JumpsText renders Jumps as iptables-restore input that appends them to the
// built-in chains. It is meant for tests and the packet tracer; running it
// against a live host repeatedly would duplicate the rules.
func JumpsText() string {
	var b strings.Builder
	for _, table := range []string{"filter", "nat"} {
		b.WriteString("*" + table + "\n")
		for _, j := range Jumps() {
			if j.Table != table {
				continue
			}
			b.WriteString("-A " + j.Chain)
			for _, a := range j.Args() {
				b.WriteByte(' ')
				b.WriteString(quote(a))
			}
			b.WriteByte('\n')
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// quote wraps an argument in double quotes when iptables-restore would
// otherwise split it. Inputs are validated to contain no quotes.
func quote(s string) string {
	if s == "" || strings.ContainsAny(s, " \t") {
		return `"` + s + `"`
	}
	return s
}

// staticNATChains and staticFilterChains are always declared (and therefore
// flushed and rewritten) by every render.
var (
	staticNATChains    = []string{ChainServices, ChainNodePorts, ChainPostrouting, ChainMarkMasq}
	staticFilterChains = []string{ChainServices, ChainExternalServices, ChainNodePorts, ChainForward, ChainProxyFirewall}
	// helperNATChains open a chunked nat restore (Ruleset.NATChunks):
	// per-service chains jump to MARK-MASQ, and POSTROUTING acts on the
	// mark it sets, so both must be in place, and agree, before any
	// Service chain is written.
	helperNATChains = []string{ChainPostrouting, ChainMarkMasq}
)

// StaticChains returns the fixed chains Render declares in a table, for
// cleanup.
func StaticChains(table string) []string {
	switch table {
	case "nat":
		return slices.Clone(staticNATChains)
	case "filter":
		return slices.Clone(staticFilterChains)
	}
	return nil
}
