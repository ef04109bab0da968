// Package flows follows the TCP connections in a packet capture taken in
// a client's namespace (tcpdump -w) and tells which requests got no
// answer. A probe that fails says what its client saw; the
// capture says what the wire carried, and the two together place a lone
// failure: a SYN never answered, an answer that came late, a reset and
// who sent it.
package flows

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sort"
	"strings"
	"time"
)

// Packet is one TCP segment of a connection, as the capture has it.
type Packet struct {
	At         time.Time
	FromClient bool
	Flags      string // S, F, R, P and . (ACK), in that order
	Seq, Ack   uint32
	Len        int // payload bytes on the wire (the IP length, not the snap length)
	// From is the Ethernet address the frame came from (zero when the
	// capture does not say): for the server's packets, which node sent
	// them.
	From MAC
}

func (p Packet) String() string {
	dir := "server>client"
	if p.FromClient {
		dir = "client>server"
	}
	s := fmt.Sprintf("%s %s [%s] seq %d ack %d len %d", p.At.UTC().Format("15:04:05.000000"), dir, p.Flags, p.Seq, p.Ack, p.Len)
	if !p.FromClient && !p.From.IsZero() {
		s += " from " + p.From.String()
	}
	return s
}

// MAC is an Ethernet address.
type MAC [6]byte

// IsZero: no address known.
func (m MAC) IsZero() bool { return m == MAC{} }

func (m MAC) String() string { return net.HardwareAddr(m[:]).String() }

// Conn is one connection: from the client's SYN to its end.
type Conn struct {
	Client, Server netip.AddrPort
	Packets        []Packet
	// Answered: the server sent data before the connection ended.
	Answered bool
	// ResetByServer, ResetByClient: a reset came from that side (for a
	// connection without an answer, at any time).
	ResetByServer, ResetByClient bool
	// AnsweredFrom is the Ethernet address of the server side's first
	// packet (its SYN-ACK); ResetFrom, that of a reset from the server's
	// address sent by another one: a node that never carried the
	// connection (its address had moved there) reset it.
	AnsweredFrom, ResetFrom MAC

	closed bool // the client sent its FIN, or a reset was seen
	finned bool // the client sent its FIN
}

func (c *Conn) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s -> %s", c.Client, c.Server)
	for _, p := range c.Packets {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// ElsewhereString is one line for a connection reset by another node:
// who answered, who reset, and whether the answer had come.
func (c *Conn) ElsewhereString() string {
	return fmt.Sprintf("%s -> %s answered by %s, reset by %s (answer before the reset: %v)", c.Client, c.Server, c.AnsweredFrom, c.ResetFrom, c.Answered)
}

// Result is what a capture shows.
type Result struct {
	Conns int // connections begun by a client SYN
	// Unanswered are the connections that got no data from the server
	// before the client's FIN or a reset (or before the capture's end),
	// with their packets, the late ones included (at most 40).
	Unanswered []*Conn
	// LateResets counts resets from the server after it answered and
	// the client sent its FIN: they cost no request.
	LateResets int
	// ResetElsewhere are the connections reset from the server's address
	// by another Ethernet address than the one that answered their SYN:
	// the address moved while they were open, and the node it moved to
	// did not know them. Counted whenever it happened (before or after
	// the answer); their packets are kept only while unanswered.
	ResetElsewhere []*Conn
}

// Scan reads a pcap file (Ethernet or Linux cooked link type,
// microsecond or nanosecond timestamps, either byte order) and follows the connections to
// serverPort. A truncated last record ends the scan without an error, as
// a capture still being written has one.
func Scan(r io.Reader, serverPort uint16) (Result, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var hdr [24]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return Result{}, fmt.Errorf("pcap header: %w", err)
	}
	var bo binary.ByteOrder
	nano := false
	switch m := binary.LittleEndian.Uint32(hdr[0:4]); m {
	case 0xa1b2c3d4, 0xa1b23c4d:
		bo, nano = binary.LittleEndian, m == 0xa1b23c4d
	case 0xd4c3b2a1, 0x4d3cb2a1:
		bo, nano = binary.BigEndian, m == 0x4d3cb2a1
	default:
		return Result{}, fmt.Errorf("not a pcap file (magic %#x)", m)
	}
	t := tracker{port: serverPort, open: map[connKey]*Conn{}}
	switch lt := bo.Uint32(hdr[20:24]) & 0x0fffffff; lt {
	case 1: // Ethernet: the type at 12, the IP packet at 14
		t.typeAt, t.ipAt, t.macAt, t.macLenAt = 12, 14, 6, -1
	case 113: // Linux cooked (tcpdump -i any, older): the sender's address at 6, its length at 4
		t.typeAt, t.ipAt, t.macAt, t.macLenAt = 14, 16, 6, 5
	case 276: // Linux cooked v2 (tcpdump -i any): the sender's address at 12, its length at 11
		t.typeAt, t.ipAt, t.macAt, t.macLenAt = 0, 20, 12, 11
	default:
		return Result{}, fmt.Errorf("link type %d: only Ethernet (1) and Linux cooked captures (113, 276) are read", lt)
	}
	var rec [16]byte
	buf := make([]byte, 0, 65536)
	for {
		if _, err := io.ReadFull(br, rec[:]); err != nil {
			break // the end, or a record cut short by the writer
		}
		sec, frac := bo.Uint32(rec[0:4]), bo.Uint32(rec[4:8])
		n := int(bo.Uint32(rec[8:12]))
		if n > 1<<18 {
			return t.result(), fmt.Errorf("record of %d bytes: a corrupt capture", n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			break
		}
		ns := int64(frac) * 1000
		if nano {
			ns = int64(frac)
		}
		t.packet(time.Unix(int64(sec), ns), buf)
	}
	return t.result(), nil
}

// connKey is a connection's client and server address and port.
type connKey struct{ client, server netip.AddrPort }

type tracker struct {
	port         uint16
	typeAt, ipAt int // where the link layer puts the EtherType and the IP packet
	// macAt is where the sender's Ethernet address is, macLenAt the
	// byte giving its length (-1: always 6).
	macAt, macLenAt int
	open            map[connKey]*Conn
	res             Result
	last            time.Time // the capture's last TCP packet
}

// inFlight is how recent a connection's SYN must be, at the capture's
// end, for an open connection without an answer to be left out: its
// answer may simply not have come yet.
const inFlight = 2 * time.Second

// packet takes one frame; what is not TCP to or from the port is
// skipped.
func (t *tracker) packet(at time.Time, b []byte) {
	if len(b) < t.ipAt {
		return
	}
	var src, dst netip.Addr
	var tcp []byte
	ipLen := 0
	switch binary.BigEndian.Uint16(b[t.typeAt : t.typeAt+2]) {
	case 0x0800:
		ip := b[t.ipAt:]
		if len(ip) < 20 || ip[9] != 6 {
			return
		}
		ihl := int(ip[0]&0x0f) * 4
		if len(ip) < ihl+20 {
			return
		}
		src, dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		ipLen = int(binary.BigEndian.Uint16(ip[2:4])) - ihl
		tcp = ip[ihl:]
	case 0x86dd:
		ip := b[t.ipAt:]
		if len(ip) < 40+20 || ip[6] != 6 { // no extension headers
			return
		}
		src, dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		ipLen = int(binary.BigEndian.Uint16(ip[4:6]))
		tcp = ip[40:]
	default:
		return
	}
	if len(tcp) < 20 {
		return
	}
	t.last = at
	sport, dport := binary.BigEndian.Uint16(tcp[0:2]), binary.BigEndian.Uint16(tcp[2:4])
	fromClient := dport == t.port
	if !fromClient && sport != t.port {
		return
	}
	client, server := netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
	if !fromClient {
		client, server = server, client
	}
	flags := tcp[13]
	syn, ack, fin, rst, psh := flags&0x02 != 0, flags&0x10 != 0, flags&0x01 != 0, flags&0x04 != 0, flags&0x08 != 0
	p := Packet{At: at, FromClient: fromClient, Seq: binary.BigEndian.Uint32(tcp[4:8]), Ack: binary.BigEndian.Uint32(tcp[8:12])}
	if t.macLenAt < 0 || b[t.macLenAt] == 6 {
		p.From = MAC(b[t.macAt : t.macAt+6])
	}
	p.Len = max(0, ipLen-int(tcp[12]>>4)*4)
	for _, f := range []struct {
		on bool
		s  string
	}{{syn, "S"}, {fin, "F"}, {rst, "R"}, {psh, "P"}, {ack, "."}} {
		if f.on {
			p.Flags += f.s
		}
	}
	key := connKey{client, server}
	c := t.open[key]
	if fromClient && syn && !ack {
		if c != nil && len(c.Packets) > 0 && c.Packets[0].Seq == p.Seq {
			c.add(p) // a retransmitted SYN
			return
		}
		t.end(key)
		c = &Conn{Client: client, Server: server}
		t.open[key] = c
		t.res.Conns++
	}
	if c == nil {
		return // begun before the capture
	}
	c.add(p)
	if !fromClient && c.AnsweredFrom.IsZero() {
		c.AnsweredFrom = p.From
	}
	if rst && !fromClient && c.ResetFrom.IsZero() && !p.From.IsZero() && p.From != c.AnsweredFrom {
		c.ResetFrom = p.From
		t.res.ResetElsewhere = append(t.res.ResetElsewhere, c)
	}
	switch {
	case !fromClient && p.Len > 0 && !c.closed:
		c.Answered = true
	case rst && fromClient:
		c.ResetByClient = true
	case rst && !fromClient && c.Answered && c.finned:
		t.res.LateResets++
	case rst && !fromClient:
		c.ResetByServer = true
	}
	if rst || (fin && fromClient) {
		c.closed = true // what the server sends from now on comes too late
	}
	if fin && fromClient {
		c.finned = true
	}
	if c.Answered && c.closed {
		c.Packets = nil // a good connection: only its late resets matter now
	}
}

// maxPackets bounds what is kept of one connection.
const maxPackets = 40

func (c *Conn) add(p Packet) {
	if len(c.Packets) < maxPackets && !(c.Answered && c.closed) {
		c.Packets = append(c.Packets, p)
	}
}

// end forgets the connection under key, keeping it if it got no answer.
func (t *tracker) end(key connKey) {
	c := t.open[key]
	if c == nil {
		return
	}
	delete(t.open, key)
	if !c.Answered {
		t.res.Unanswered = append(t.res.Unanswered, c)
	}
}

func (t *tracker) result() Result {
	for key, c := range t.open {
		if !c.closed && !c.Answered && len(c.Packets) > 0 && t.last.Sub(c.Packets[0].At) < inFlight {
			continue
		}
		t.end(key)
	}
	sort.Slice(t.res.Unanswered, func(i, j int) bool {
		return t.res.Unanswered[i].Packets[0].At.Before(t.res.Unanswered[j].Packets[0].At)
	})
	return t.res
}

// Report is a capture's result as lab-flows prints it: the counts, then
// at most limit connections without an answer.
func Report(name string, r Result, limit int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d connections, %d without an answer, %d resets after an answer, %d reset by another node than the one that answered\n", name, r.Conns, len(r.Unanswered), r.LateResets, len(r.ResetElsewhere))
	list(&b, r.ResetElsewhere, (*Conn).ElsewhereString, limit, " reset elsewhere")
	list(&b, r.Unanswered, (*Conn).String, limit, "")
	return b.String()
}

// list writes at most limit connections, each as line gives it.
func list(b *strings.Builder, conns []*Conn, line func(*Conn) string, limit int, what string) {
	for i, c := range conns {
		if i == limit {
			fmt.Fprintf(b, "... %d more%s\n", len(conns)-limit, what)
			return
		}
		b.WriteString(line(c))
		b.WriteString("\n")
	}
}
