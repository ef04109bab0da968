package proxy

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/herald-lb/herald/proxy/iptables"
)

// iptablesMode decides which iptables the proxy runs (nft or legacy, as
// the node's other rules; iptables.Decide) and logs why, so a node whose
// rules land where nobody looks can be told from the log.
func iptablesMode(ctx context.Context, requested iptables.Mode, log *slog.Logger) (iptables.Mode, error) {
	obs := iptables.Observe(ctx, iptables.ExecHost{}, requested == iptables.ModeAuto)
	for _, p := range obs.Problems {
		log.Warn("iptables backend detection: a tool failed; deciding without it", "problem", p)
	}
	c, err := iptables.Decide(requested, obs)
	if err != nil {
		return "", fmt.Errorf("--iptables-backend=%s: %w", requested, err)
	}
	log.Info("iptables backend", "mode", c.Mode, "requested", requested, "reason", c.Reason,
		"nftRules", obs.NFT.Rules, "legacyRules", obs.Legacy.Rules, "plainIptables", obs.System)
	return c.Mode, nil
}
