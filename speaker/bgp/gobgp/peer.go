package gobgp

import (
	"fmt"
	"time"

	api "github.com/osrg/gobgp/v4/api"

	"github.com/herald-lb/herald/config"
)

const (
	// gracefulRestartTime is the restart time announced in the graceful
	// restart capability: how long routers keep our routes while the
	// session is down, in seconds (FRR's and BIRD's default).
	gracefulRestartTime = 120
	// multihopTTL is the TTL of eBGP multi-hop sessions: any distance.
	multihopTTL = 255
)

// apiPeer converts a BGPPeer to GoBGP's neighbor configuration. This is
// the one place the password leaves its config.Secret: straight to GoBGP,
// which sets it as the socket's TCP MD5 key.
func apiPeer(p *config.Peer) (*api.Peer, error) {
	addr := p.Address.Unmap()
	switch {
	case p.DynamicASN != "" || p.PeerASN == 0:
		return nil, fmt.Errorf("BGPPeer %s: spec.dynamicASN (%q) is not supported by the embedded GoBGP, which must know the peer's ASN before the session opens: set spec.peerASN instead", p.Name, p.DynamicASN)
	case !addr.IsValid():
		return nil, fmt.Errorf("BGPPeer %s: no spec.peerAddress", p.Name)
	case p.HoldTime == 0:
		// GoBGP takes a zero hold time as unset and would offer 90s.
		return nil, fmt.Errorf("BGPPeer %s: spec.holdTime 0s (no keepalives) is not supported by the embedded GoBGP, which would offer 90s instead: set a hold time between 3s and 65535s", p.Name)
	}
	family := &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	if addr.Is6() {
		family.Afi = api.Family_AFI_IP6
	}
	ap := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: addr.String(),
			PeerAsn:         p.PeerASN,
			LocalAsn:        p.MyASN,
			AuthPassword:    p.Password.Reveal(),
			Description:     p.Name,
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime:          seconds(p.HoldTime),
			KeepaliveInterval: seconds(p.KeepaliveTime),
			// 0 leaves GoBGP's default (120s).
			ConnectRetry: seconds(p.ConnectTime),
		}},
		Transport: &api.Transport{RemotePort: uint32(p.Port)},
		// Only the family of the session's address: IPv4 prefixes go to
		// IPv4 peers, IPv6 ones to IPv6 peers.
		AfiSafis: []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: family, Enabled: true}}},
	}
	if src := p.SourceAddress.Unmap(); src.IsValid() {
		ap.Transport.LocalAddress = src.String()
	}
	if p.EBGPMultiHop {
		ap.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: multihopTTL}
	}
	if p.GracefulRestart {
		ap.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: gracefulRestartTime}
		ap.AfiSafis[0].MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
	}
	if b := p.BFD; b != nil {
		// The profile is in milliseconds, GoBGP counts microseconds.
		ap.Bfd = &api.BfdPeerConfig{
			Enabled:                  true,
			DesiredMinimumTxInterval: b.TransmitInterval * 1000,
			RequiredMinimumReceive:   b.ReceiveInterval * 1000,
			DetectionMultiplier:      b.DetectMultiplier,
		}
	}
	return ap, nil
}

func seconds(d time.Duration) uint64 { return uint64(d / time.Second) }
