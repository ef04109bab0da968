package gobgp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	speakerbgp "github.com/herald-lb/herald/speaker/bgp"
)

// levelHandler passes on GoBGP's records from a level up: GoBGP reports
// every FSM step at info, which would drown the speaker's own messages
// (the session changes are logged by sessionLog instead).
type levelHandler struct {
	inner slog.Handler
	level slog.Leveler
}

func (h *levelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level.Level() && h.inner.Enabled(ctx, l)
}

func (h *levelHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.inner.Handle(ctx, r)
}

func (h *levelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &levelHandler{inner: h.inner.WithAttrs(attrs), level: h.level}
}

func (h *levelHandler) WithGroup(name string) slog.Handler {
	return &levelHandler{inner: h.inner.WithGroup(name), level: h.level}
}

// sessionLog follows GoBGP's session state events: GoBGP records when a
// session came up or went down, but neither when it entered its other
// states nor how many times it left Established (its "flops" count only
// sessions lasting under 30 seconds).
type sessionLog struct {
	log *slog.Logger

	// refuse is called, in a goroutine of its own, when a session comes
	// up with an AS number its BGPPeer does not allow; s is the tracked
	// session, so a peer re-added since is left alone.
	refuse func(addr netip.Addr, s *session, why string)

	mu       sync.Mutex
	sessions map[netip.Addr]*session
}

type session struct {
	name  string
	state bgp.FSMState
	since time.Time
	flaps uint64
	// notAS is an AS number the peer must not have (our own, for
	// dynamicASN external, where GoBGP accepts any); 0 for none.
	notAS uint32
}

func newSessionLog(log *slog.Logger) *sessionLog {
	return &sessionLog{log: log, sessions: map[netip.Addr]*session{}}
}

// track starts following the session to addr, just added. notAS is an
// AS number the peer must not turn out to have, or 0.
func (l *sessionLog) track(addr netip.Addr, name string, notAS uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sessions[addr] = &session{name: name, state: bgp.BGP_FSM_IDLE, since: time.Now(), notAS: notAS}
}

// current tells whether s is still the session tracked for addr.
func (l *sessionLog) current(addr netip.Addr, s *session) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sessions[addr] == s
}

// forget stops following a session; its late events are ignored.
func (l *sessionLog) forget(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.sessions, addr)
}

func (l *sessionLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.sessions)
}

// get returns when the session entered state (zero if the log does not
// know, or knows another state) and its flaps.
func (l *sessionLog) get(addr netip.Addr, state bgp.FSMState) (since time.Time, flaps uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sessions[addr]
	if s == nil {
		return time.Time{}, 0
	}
	if s.state == state {
		since = s.since
	}
	return since, s.flaps
}

// event is GoBGP's watch callback; GoBGP delivers events in order.
func (l *sessionLog) event(ev *apiutil.WatchEventMessage_PeerEvent, t time.Time) {
	if ev.Type != apiutil.PEER_EVENT_STATE {
		return
	}
	st := ev.Peer.State
	addr := st.NeighborAddress.Unmap()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sessions[addr]
	if s == nil || s.state == st.SessionState {
		return
	}
	switch {
	case st.SessionState == bgp.BGP_FSM_ESTABLISHED && s.notAS != 0 && st.PeerASN == s.notAS:
		why := fmt.Sprintf("BGPPeer %s: spec.dynamicASN is external, but the peer at %s is in our own AS %d", s.name, addr, st.PeerASN)
		l.log.Error("BGP session refused: shutting it down", "peer", s.name, "address", addr, "why", why)
		if l.refuse != nil {
			// Not from GoBGP's event goroutine, which the shutdown waits on.
			go l.refuse(addr, s, why)
		}
	case st.SessionState == bgp.BGP_FSM_ESTABLISHED:
		l.log.Info("BGP session established", "peer", s.name, "address", addr)
	case s.state == bgp.BGP_FSM_ESTABLISHED:
		s.flaps++
		why := st.DisconnectMessage
		if why == "" {
			why = reason(st.DisconnectReason)
		}
		l.log.Warn("BGP session down", "peer", s.name, "address", addr, "state", stateName(st.SessionState), "why", why)
	default:
		l.log.Debug("BGP session state", "peer", s.name, "address", addr, "state", stateName(st.SessionState))
	}
	s.state, s.since = st.SessionState, t
}

func reason(r api.PeerState_DisconnectReason) string {
	s := strings.TrimPrefix(r.String(), "DISCONNECT_REASON_")
	return strings.ReplaceAll(strings.ToLower(s), "_", " ")
}

func stateName(s bgp.FSMState) string {
	switch s {
	case bgp.BGP_FSM_CONNECT:
		return speakerbgp.StateConnect
	case bgp.BGP_FSM_ACTIVE:
		return speakerbgp.StateActive
	case bgp.BGP_FSM_OPENSENT:
		return speakerbgp.StateOpenSent
	case bgp.BGP_FSM_OPENCONFIRM:
		return speakerbgp.StateOpenConfirm
	case bgp.BGP_FSM_ESTABLISHED:
		return speakerbgp.StateEstablished
	default:
		return speakerbgp.StateIdle
	}
}

// fsmState converts ListPeer's session state to the FSM's.
func fsmState(s api.PeerState_SessionState) bgp.FSMState {
	switch s {
	case api.PeerState_SESSION_STATE_CONNECT:
		return bgp.BGP_FSM_CONNECT
	case api.PeerState_SESSION_STATE_ACTIVE:
		return bgp.BGP_FSM_ACTIVE
	case api.PeerState_SESSION_STATE_OPENSENT:
		return bgp.BGP_FSM_OPENSENT
	case api.PeerState_SESSION_STATE_OPENCONFIRM:
		return bgp.BGP_FSM_OPENCONFIRM
	case api.PeerState_SESSION_STATE_ESTABLISHED:
		return bgp.BGP_FSM_ESTABLISHED
	default:
		return bgp.BGP_FSM_IDLE
	}
}

// bfdState names a BFD session state; a session GoBGP has not set up yet
// is down.
func bfdState(s api.BfdSessionState) string {
	switch s {
	case api.BfdSessionState_BFD_SESSION_STATE_UP:
		return "Up"
	case api.BfdSessionState_BFD_SESSION_STATE_INIT:
		return "Init"
	case api.BfdSessionState_BFD_SESSION_STATE_ADMIN_DOWN:
		return "AdminDown"
	default:
		return "Down"
	}
}
