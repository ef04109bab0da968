package layer2

import (
	"bytes"
	"errors"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
)

// Interface is the interface a responder answers on.
type Interface struct {
	Name  string
	Index int
	MAC   net.HardwareAddr
}

// Announcer is the speaker's current election result.
type Announcer interface {
	// Announcing reports whether this node won the election for ip and
	// announces it on iface.
	Announcing(ip netip.Addr, iface string) bool
}

// AnnouncerFunc adapts a function to Announcer.
type AnnouncerFunc func(ip netip.Addr, iface string) bool

// Announcing calls f.
func (f AnnouncerFunc) Announcing(ip netip.Addr, iface string) bool { return f(ip, iface) }

// forOther is optionally implemented by an Announcer (Announcements
// does): the MAC of the node this one answers for ip on iface, nil when
// none. A node that just handed an address over answers for it with the
// new holder's MAC until the new holder answers itself, so that no
// request meets silence and every answer names one MAC.
type forOther interface {
	// AnswerWith is the MAC to answer for ip on iface with: this
	// interface's own (own) when it announces ip there, another node's
	// when it answers for that one, nil when neither, read at once.
	AnswerWith(ip netip.Addr, iface string) (mac net.HardwareAddr, own bool)
}

// anywhere is optionally implemented by an Announcer (Announcements does)
// to tell "announced on another interface" from "not announced" in
// Decision.Reason.
type anywhere interface {
	AnnouncingAnywhere(ip netip.Addr) bool
}

// Reason says why a frame was or was not answered.
type Reason string

// The reasons.
const (
	ReasonReplied        Reason = "replied"
	ReasonUnsupported    Reason = "not an ARP request or neighbor solicitation"
	ReasonMalformed      Reason = "malformed"
	ReasonOwnFrame       Reason = "sent from this interface's MAC"
	ReasonOtherHost      Reason = "addressed to another host's MAC"
	ReasonGratuitous     Reason = "gratuitous ARP from another host"
	ReasonConflict       Reason = "another host claims an IP this node announces"
	ReasonNotAnnounced   Reason = "IP not announced by this node"
	ReasonOtherInterface Reason = "IP announced by this node on another interface"
	ReasonEncode         Reason = "reply could not be encoded"
	// ReasonPaused: the process was just paused (Wake).
	ReasonPaused Reason = "this process was just paused"
)

// Decision is what to do with one received frame.
type Decision struct {
	// Reply is the frame to send; nil when Reason is not ReasonReplied.
	Reply  []byte
	Reason Reason
	// Err is the decode (or, for ReasonEncode, encode) error.
	Err error
	// Family and Target are set when the frame decoded.
	Family Family
	Target netip.Addr
}

// Decide decides the reply to frame received on ifi: an ARP reply or a
// neighbor advertisement for an address a announces on ifi, else none and
// why. It never answers for an address a does not announce on ifi.
func Decide(frame []byte, ifi Interface, a Announcer) Decision {
	req, err := Decode(frame)
	if err != nil {
		d := Decision{Reason: ReasonUnsupported, Err: err}
		if errors.Is(err, ErrMalformed) {
			d.Reason = ReasonMalformed
		}
		return d
	}
	d := Decision{Family: req.Family(), Target: req.Target()}
	var ethSrc, ethDst, sender net.HardwareAddr
	if req.ARP != nil {
		ethSrc, ethDst, sender = req.ARP.EthernetSource, req.ARP.EthernetDestination, req.ARP.SenderMAC
	} else {
		ethSrc, ethDst, sender = req.NS.EthernetSource, req.NS.EthernetDestination, req.NS.SourceLinkLayer
	}
	switch {
	case bytes.Equal(ethSrc, ifi.MAC) || bytes.Equal(sender, ifi.MAC):
		// Our own frames, looped back or from another responder on
		// this MAC; answering would only talk to ourselves.
		d.Reason = ReasonOwnFrame
		return d
	case ethDst[0]&1 == 0 && !bytes.Equal(ethDst, ifi.MAC):
		// Seen only because the interface is promiscuous (say, tcpdump
		// runs): the kernel would drop it and so do we.
		d.Reason = ReasonOtherHost
		return d
	}
	var announced bool
	var mac net.HardwareAddr
	if f, ok := a.(forOther); ok {
		// One read, so that a change between two does not leave the
		// request unanswered.
		var own bool
		if mac, own = f.AnswerWith(d.Target, ifi.Name); own {
			mac, announced = ifi.MAC, true
		}
	} else if announced = a.Announcing(d.Target, ifi.Name); announced {
		mac = ifi.MAC
	}
	if req.ARP != nil && req.ARP.Gratuitous() {
		// Nobody is asking; someone is telling. If they tell about our
		// IP, that is an address conflict worth reporting.
		d.Reason = ReasonGratuitous
		if announced {
			d.Reason = ReasonConflict
		}
		return d
	}
	if mac == nil {
		d.Reason = ReasonNotAnnounced
		if w, ok := a.(anywhere); ok && w.AnnouncingAnywhere(d.Target) {
			d.Reason = ReasonOtherInterface
		}
		return d
	}
	if req.ARP != nil {
		d.Reply, err = ARPReplyFor(*req.ARP, ifi.MAC, mac)
	} else {
		d.Reply, err = NeighborAdvertisementFor(*req.NS, ifi.MAC, mac)
	}
	if err != nil {
		return Decision{Reason: ReasonEncode, Err: err, Family: d.Family, Target: d.Target}
	}
	d.Reason = ReasonReplied
	return d
}

// Announcements is a concurrency-safe Announcer: the set of IPs this node
// announces and, per IP, the interfaces it announces them on. The speaker
// replaces it wholesale after each election, and adds an address between
// two when its former holder released it.
type Announcements struct {
	mu sync.RWMutex
	m  map[netip.Addr][]string
	// others are the addresses answered for another node: per address
	// and interface, its MAC.
	others map[netip.Addr]map[string]net.HardwareAddr
}

// SetOthers replaces the addresses answered for other nodes, with their
// MACs per interface. They are not announced by this node (Announcing
// is false for them); only requests are answered.
func (s *Announcements) SetOthers(m map[netip.Addr]map[string]net.HardwareAddr) {
	c := cloneOthers(m)
	s.mu.Lock()
	s.others = c
	s.mu.Unlock()
}

// SetBoth is Set and SetOthers at once: no request meets the state
// between the two.
func (s *Announcements) SetBoth(ips map[netip.Addr][]string, others map[netip.Addr]map[string]net.HardwareAddr) {
	m := make(map[netip.Addr][]string, len(ips))
	for ip, ifaces := range ips {
		m[ip.Unmap()] = slices.Clone(ifaces)
	}
	c := cloneOthers(others)
	s.mu.Lock()
	s.m, s.others = m, c
	s.mu.Unlock()
}

func cloneOthers(m map[netip.Addr]map[string]net.HardwareAddr) map[netip.Addr]map[string]net.HardwareAddr {
	c := make(map[netip.Addr]map[string]net.HardwareAddr, len(m))
	for ip, macs := range m {
		c[ip.Unmap()] = maps.Clone(macs)
	}
	return c
}

// AnsweringFor is the MAC of the node this one answers for ip on iface
// for, nil when none.
func (s *Announcements) AnsweringFor(ip netip.Addr, iface string) net.HardwareAddr {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.others[ip.Unmap()][iface]
}

// AnswerWith implements forOther; nil, true means this node's own MAC.
func (s *Announcements) AnswerWith(ip netip.Addr, iface string) (net.HardwareAddr, bool) {
	ip = ip.Unmap()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if slices.Contains(s.m[ip], iface) {
		return nil, true
	}
	return s.others[ip][iface], false
}

// Listening is what the responder of iface must receive requests for:
// the IPs announced there and those answered there for other nodes,
// sorted (the IPv6 ones are what Responder.SyncGroups needs).
func (s *Announcements) Listening(iface string) []netip.Addr {
	s.mu.RLock()
	var ips []netip.Addr
	for ip, ifaces := range s.m {
		if slices.Contains(ifaces, iface) {
			ips = append(ips, ip)
		}
	}
	for ip, macs := range s.others {
		if _, ok := macs[iface]; ok && !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(ips, netip.Addr.Compare)
	return ips
}

// Set replaces the announced IPs: ips maps each IP to its interfaces.
func (s *Announcements) Set(ips map[netip.Addr][]string) {
	m := make(map[netip.Addr][]string, len(ips))
	for ip, ifaces := range ips {
		m[ip.Unmap()] = slices.Clone(ifaces)
	}
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
}

// Add announces more IPs, keeping the others: for an address whose
// former holder just said it stopped, between two elections.
func (s *Announcements) Add(ips map[netip.Addr][]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[netip.Addr][]string, len(s.m)+len(ips))
	for ip, ifaces := range s.m {
		m[ip] = ifaces
	}
	for ip, ifaces := range ips {
		m[ip.Unmap()] = slices.Clone(ifaces)
	}
	s.m = m
}

// Announcing implements Announcer.
func (s *Announcements) Announcing(ip netip.Addr, iface string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Contains(s.m[ip.Unmap()], iface)
}

// AnnouncingAnywhere reports whether ip is announced on any interface.
func (s *Announcements) AnnouncingAnywhere(ip netip.Addr) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.m[ip.Unmap()]) > 0
}

// On returns the IPs announced on iface, sorted; the IPv6 ones are what
// Responder.SyncGroups needs.
func (s *Announcements) On(iface string) []netip.Addr {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var ips []netip.Addr
	for ip, ifaces := range s.m {
		if slices.Contains(ifaces, iface) {
			ips = append(ips, ip)
		}
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	return ips
}
