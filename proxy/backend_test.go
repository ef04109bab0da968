package proxy

import (
	"io"
	"strings"
	"testing"

	"github.com/herald-lb/herald/proxy/iptables"
)

func TestIPTablesBackendFlag(t *testing.T) {
	t.Setenv("NODE_NAME", "node1")
	for args, want := range map[string]iptables.Mode{"": iptables.ModeAuto, "--iptables-backend=legacy": iptables.ModeLegacy, "--iptables-backend=nft": iptables.ModeNFT} {
		o, err := ParseFlags(strings.Fields(args), io.Discard)
		if err != nil || o.IPTablesBackend != want {
			t.Errorf("%q: %s, %v; want %s", args, o.IPTablesBackend, err, want)
		}
	}
	_, err := ParseFlags([]string{"--iptables-backend=ipvs"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "iptables-backend") || !strings.Contains(err.Error(), "auto, nft, legacy") {
		t.Errorf("--iptables-backend=ipvs: %v", err)
	}
}
