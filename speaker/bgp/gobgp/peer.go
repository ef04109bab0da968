package gobgp

import (
	"fmt"
	"time"

	api "github.com/osrg/gobgp/v4/api"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/v1beta1"
)

const (
	// gracefulRestartTime is the restart time announced in the graceful
	// restart capability: how long routers keep our routes while the
	// session is down, in seconds (FRR's and BIRD's default).
	gracefulRestartTime = 120
	// multihopTTL is the TTL of eBGP multi-hop sessions: any distance.
	multihopTTL = 255
	// idleHoldAfterReset is how long GoBGP waits, in seconds, before it
	// reconnects a session it reset. BFD going down resets the session;
	// GoBGP's default of 30s would keep a session that BFD dropped down
	// for half a minute after the path is back. 5s is GoBGP's wait after
	// any other session loss.
	idleHoldAfterReset = 5
	// defaultConnectRetry is the wait between connection attempts, in
	// seconds, when the BGPPeer sets no connectTime. GoBGP's own default
	// is 120s, and herald only connects out (routers cannot call back):
	// a router that restarts and is not listening yet at GoBGP's first
	// attempt, two seconds after the session dropped, would wait two
	// minutes for the next.
	defaultConnectRetry = 5
)

// apiPeer converts a BGPPeer to GoBGP's neighbor configuration. This is
// the one place the password leaves its config.Secret: straight to GoBGP,
// which sets it as the socket's TCP MD5 key.
func apiPeer(p *config.Peer) (*api.Peer, error) {
	addr := p.Address.Unmap()
	peerASN := p.PeerASN
	switch {
	case p.DynamicASN == string(v1beta1.DynamicASNInternal):
		// iBGP: the peer's AS is ours.
		peerASN = p.MyASN
	case p.DynamicASN == string(v1beta1.DynamicASNExternal):
		// 0 makes GoBGP take any AS from the OPEN; the session log shuts
		// the session down if that is our own (sessionLog.event).
		peerASN = 0
	case p.DynamicASN != "" || p.PeerASN == 0:
		return nil, fmt.Errorf("BGPPeer %s: spec.dynamicASN %q is not supported: use \"internal\" or \"external\", or set spec.peerASN", p.Name, p.DynamicASN)
	}
	switch {
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
			PeerAsn:         peerASN,
			LocalAsn:        p.MyASN,
			AuthPassword:    p.Password.Reveal(),
			Description:     p.Name,
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime:               seconds(p.HoldTime),
			KeepaliveInterval:      seconds(p.KeepaliveTime),
			ConnectRetry:           connectRetry(p.ConnectTime),
			IdleHoldTimeAfterReset: idleHoldAfterReset,
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

// connectRetry is the BGPPeer's connectTime in seconds, or
// defaultConnectRetry when it sets none.
func connectRetry(d time.Duration) uint64 {
	if d <= 0 {
		return defaultConnectRetry
	}
	return seconds(d)
}
