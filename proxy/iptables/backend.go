package iptables

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Mode is which of iptables' two kernel interfaces the proxy drives.
// Since iptables 1.8 the same rules can go through the old xtables API
// ("legacy") or through nftables ("nft"), and the kernel keeps the two
// apart: rules of one are invisible to the other's tools, and a rule
// prepended with one still runs after every rule of the other. So a proxy
// in a container, which brings its own iptables, must use the interface
// the node's other users (kubelet, the firewall) use, or its rules would
// be ordered against theirs by accident.
type Mode string

// Modes. Auto is only ever asked for; Detect turns it into one of the
// others.
const (
	ModeAuto   Mode = "auto"
	ModeNFT    Mode = "nft"
	ModeLegacy Mode = "legacy"
	// ModeSystem runs plain `iptables`, whatever the system's
	// alternatives point it to (what the proxy did before it detected
	// anything; kept where no variant is installed).
	ModeSystem Mode = "system"
)

// UnmarshalText reads --iptables-backend; only auto, nft and legacy may
// be asked for.
func (m *Mode) UnmarshalText(b []byte) error {
	switch v := Mode(strings.TrimSpace(string(b))); v {
	case ModeAuto, ModeNFT, ModeLegacy:
		*m = v
		return nil
	default:
		return fmt.Errorf("%q is not one of auto, nft, legacy", string(b))
	}
}

// MarshalText implements encoding.TextMarshaler (flag.TextVar needs it).
func (m Mode) MarshalText() ([]byte, error) { return []byte(m), nil }

// Tools are the binaries one family and mode run.
type Tools struct {
	IPTables, Restore, Save string
}

// ToolsFor names the binaries: iptables-nft-restore, ip6tables-legacy-save,
// or the plain names for ModeSystem.
func ToolsFor(family Family, mode Mode) Tools {
	base := "iptables"
	if family == IPv6 {
		base = "ip6tables"
	}
	if mode == ModeNFT || mode == ModeLegacy {
		base += "-" + string(mode)
	}
	return Tools{IPTables: base, Restore: base + "-restore", Save: base + "-save"}
}

// Evidence is what detection found of one mode on the node, IPv4 and
// IPv6 added up.
type Evidence struct {
	// Installed: its save tool exists for at least one family.
	Installed bool
	// KubeletHint: a chain kubelet (1.17 and later) creates in the mode
	// it uses, KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY, is there.
	KubeletHint bool
	// Rules counts rules ("-A" lines of iptables-save).
	Rules int
}

// Observation is everything Decide looks at.
type Observation struct {
	NFT, Legacy Evidence
	// System is the mode plain `iptables --version` reports (nf_tables or
	// legacy), ModeSystem when it runs but does not say, and "" when
	// there is no plain iptables.
	System Mode
	// Problems are tools that failed while looking; detection goes on
	// without what they would have said.
	Problems []string
}

// Choice is the mode to use and why, for the log.
type Choice struct {
	Mode   Mode
	Reason string
}

// Decide picks the mode. For auto it follows kube-proxy's image
// (kubernetes-sigs/iptables-wrappers): kubelet's chains first, nft
// before legacy, since kubelet writes them in the mode the node uses; then
// whichever mode holds more rules, as some process on the node (kubelet,
// a firewall, this proxy before a restart) has written rules in the mode
// that counts. With no evidence either way it takes the mode plain
// `iptables` is set to, nft when that does not say: in an image, as in the
// wrapper, that is nft; on a host it is the administrator's choice.
func Decide(requested Mode, o Observation) (Choice, error) {
	switch requested {
	case ModeNFT, ModeLegacy:
		e := o.NFT
		if requested == ModeLegacy {
			e = o.Legacy
		}
		if !e.Installed {
			return Choice{}, fmt.Errorf("iptables backend %s was asked for, but %s is not installed", requested, ToolsFor(IPv4, requested).Save)
		}
		return Choice{requested, "asked for"}, nil
	case ModeAuto, "":
	default:
		return Choice{}, fmt.Errorf("unknown iptables backend %q", requested)
	}
	switch {
	case !o.NFT.Installed && !o.Legacy.Installed:
		if o.System == "" {
			return Choice{}, fmt.Errorf("no iptables found: neither iptables nor iptables-nft or iptables-legacy is installed")
		}
		return Choice{ModeSystem, "only plain iptables is installed: using it as the system has it set up"}, nil
	case !o.Legacy.Installed:
		return Choice{ModeNFT, "only the nft variant is installed"}, nil
	case !o.NFT.Installed:
		return Choice{ModeLegacy, "only the legacy variant is installed"}, nil
	case o.NFT.KubeletHint:
		return Choice{ModeNFT, "kubelet's chains are in nftables"}, nil
	case o.Legacy.KubeletHint:
		return Choice{ModeLegacy, "kubelet's chains are in legacy iptables"}, nil
	case o.Legacy.Rules > o.NFT.Rules:
		return Choice{ModeLegacy, fmt.Sprintf("legacy iptables holds more rules (%d legacy, %d nft)", o.Legacy.Rules, o.NFT.Rules)}, nil
	case o.NFT.Rules > o.Legacy.Rules:
		return Choice{ModeNFT, fmt.Sprintf("nftables holds more rules (%d nft, %d legacy)", o.NFT.Rules, o.Legacy.Rules)}, nil
	case o.System == ModeLegacy:
		return Choice{ModeLegacy, fmt.Sprintf("no rules tell (%d each); plain iptables is set to legacy", o.NFT.Rules)}, nil
	default:
		return Choice{ModeNFT, fmt.Sprintf("no rules tell (%d each): nft, the default", o.NFT.Rules)}, nil
	}
}

// Host is how Detect looks at the node: finding and running tools.
type Host interface {
	LookPath(file string) (string, error)
	Output(ctx context.Context, name string, args ...string) ([]byte, error)
}

// ExecHost runs the tools of this process's mount and network namespace.
type ExecHost struct{}

// LookPath implements Host.
func (ExecHost) LookPath(file string) (string, error) { return exec.LookPath(file) }

// Output implements Host.
func (ExecHost) Output(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).Output()
}

// Detect observes the node through h and decides. Asking for nft or
// legacy only checks that the tools are there.
func Detect(ctx context.Context, h Host, requested Mode) (Choice, error) {
	return Decide(requested, Observe(ctx, h, requested == ModeAuto || requested == ""))
}

// Observe gathers the Observation; with rules false it only looks for
// the tools. The saves dump whole rulesets, never one table: `-t mangle`
// would make the legacy kernel module create that table if it is not
// there, a change to the node just by looking.
func Observe(ctx context.Context, h Host, rules bool) Observation {
	var o Observation
	if _, err := h.LookPath("iptables"); err == nil {
		o.System = ModeSystem
		if out, err := h.Output(ctx, "iptables", "--version"); err != nil {
			o.Problems = append(o.Problems, "iptables --version: "+err.Error())
		} else if s := string(out); strings.Contains(s, "(nf_tables)") {
			o.System = ModeNFT
		} else if strings.Contains(s, "(legacy)") {
			o.System = ModeLegacy
		}
	}
	for _, m := range []Mode{ModeNFT, ModeLegacy} {
		e := &o.NFT
		if m == ModeLegacy {
			e = &o.Legacy
		}
		for _, f := range []Family{IPv4, IPv6} {
			save := ToolsFor(f, m).Save
			if _, err := h.LookPath(save); err != nil {
				continue
			}
			e.Installed = true
			if !rules {
				continue
			}
			out, err := h.Output(ctx, save)
			if err != nil {
				o.Problems = append(o.Problems, save+": "+err.Error())
				continue
			}
			n, hint := countRules(out)
			e.Rules += n
			e.KubeletHint = e.KubeletHint || hint
		}
	}
	return o
}

// countRules reads iptables-save output: the rules, and whether one of
// kubelet's mode hint chains is declared.
func countRules(save []byte) (rules int, kubeletHint bool) {
	for l := range Lines(save) {
		switch {
		case l.Kind == LineRule:
			rules++
		case l.Kind == LineChain && (string(l.Name) == "KUBE-IPTABLES-HINT" || string(l.Name) == "KUBE-KUBELET-CANARY"):
			kubeletHint = true
		}
	}
	return rules, kubeletHint
}
