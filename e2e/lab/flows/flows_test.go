package flows

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// capture builds a pcap file (Ethernet, microseconds) of TCP segments.
type capture struct {
	buf bytes.Buffer
	t0  time.Time
	// from is the source Ethernet address of the frames seg writes.
	from MAC
}

func newCapture() *capture {
	c := &capture{t0: time.Unix(1795900000, 0)}
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:4], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(h[4:6], 2)
	binary.LittleEndian.PutUint16(h[6:8], 4)
	binary.LittleEndian.PutUint32(h[16:20], 96)
	binary.LittleEndian.PutUint32(h[20:24], 1)
	c.buf.Write(h[:])
	return c
}

// seg adds a segment at ms milliseconds from src to dst with flags
// ("S", "SA", "A", "PA", "FA", "R") and n payload bytes (not captured:
// snap length 96, as the lab's captures take them).
func (c *capture) seg(ms int, src, dst netip.AddrPort, flags string, seq, ack uint32, n int) {
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:2], src.Port())
	binary.BigEndian.PutUint16(tcp[2:4], dst.Port())
	binary.BigEndian.PutUint32(tcp[4:8], seq)
	binary.BigEndian.PutUint32(tcp[8:12], ack)
	tcp[12] = 5 << 4
	for _, f := range flags {
		tcp[13] |= map[rune]byte{'F': 0x01, 'S': 0x02, 'R': 0x04, 'P': 0x08, 'A': 0x10}[f]
	}
	var frame []byte
	eth := make([]byte, 14)
	copy(eth[6:12], c.from[:])
	if src.Addr().Is4() {
		binary.BigEndian.PutUint16(eth[12:14], 0x0800)
		ip := make([]byte, 20)
		ip[0], ip[9] = 0x45, 6
		binary.BigEndian.PutUint16(ip[2:4], uint16(20+20+n))
		a, b := src.Addr().As4(), dst.Addr().As4()
		copy(ip[12:16], a[:])
		copy(ip[16:20], b[:])
		frame = append(append(eth, ip...), tcp...)
	} else {
		binary.BigEndian.PutUint16(eth[12:14], 0x86dd)
		ip := make([]byte, 40)
		ip[0], ip[6] = 0x60, 6
		binary.BigEndian.PutUint16(ip[4:6], uint16(20+n))
		a, b := src.Addr().As16(), dst.Addr().As16()
		copy(ip[8:24], a[:])
		copy(ip[24:40], b[:])
		frame = append(append(eth, ip...), tcp...)
	}
	at := c.t0.Add(time.Duration(ms) * time.Millisecond)
	var r [16]byte
	binary.LittleEndian.PutUint32(r[0:4], uint32(at.Unix()))
	binary.LittleEndian.PutUint32(r[4:8], uint32(at.Nanosecond()/1000))
	binary.LittleEndian.PutUint32(r[8:12], uint32(len(frame)))
	binary.LittleEndian.PutUint32(r[12:16], uint32(len(frame)+n))
	c.buf.Write(r[:])
	c.buf.Write(frame)
}

var (
	vip    = netip.MustParseAddrPort("198.51.100.120:80")
	vip6   = netip.MustParseAddrPort("[2001:db8:0:1::1:1]:80")
	client = func(port uint16) netip.AddrPort {
		return netip.AddrPortFrom(netip.MustParseAddr("198.51.100.100"), port)
	}
	client6 = netip.MustParseAddrPort("[2001:db8:0:1::100]:40000")
)

// answered is a whole request: handshake, request, answer, the client's
// FIN first.
func (c *capture) answered(ms int, cl, sv netip.AddrPort) { c.answeredFrom(ms, cl, sv, 100) }

// answeredFrom is answered with the client's initial sequence number.
func (c *capture) answeredFrom(ms int, cl, sv netip.AddrPort, isn uint32) {
	c.seg(ms, cl, sv, "S", isn, 0, 0)
	c.seg(ms, sv, cl, "SA", 500, isn+1, 0)
	c.seg(ms, cl, sv, "A", isn+1, 501, 0)
	c.seg(ms+1, cl, sv, "PA", isn+1, 501, 40)
	c.seg(ms+2, sv, cl, "PA", 501, isn+41, 400)
	c.seg(ms+3, cl, sv, "FA", isn+41, 901, 0)
	c.seg(ms+4, sv, cl, "FA", 901, isn+42, 0)
	c.seg(ms+4, cl, sv, "A", isn+42, 902, 0)
}

// request is a handshake at ms and the client's 40-byte request a
// millisecond later, client ISN 100, server ISN 500: what comes after is
// the test's.
func (c *capture) request(ms int, cl, sv netip.AddrPort) {
	c.seg(ms, cl, sv, "S", 100, 0, 0)
	c.seg(ms, sv, cl, "SA", 500, 101, 0)
	c.seg(ms, cl, sv, "A", 101, 501, 0)
	c.seg(ms+1, cl, sv, "PA", 101, 501, 40)
}

func TestScan(t *testing.T) {
	c := newCapture()
	c.answered(0, client(40001), vip)
	c.answered(10, client6, vip6)
	// The pod's late ACK after its FIN, the client's duplicate, the
	// pod's reset: harmless, counted apart.
	c.seg(15, vip6, client6, "A", 901, 142, 0)
	c.seg(15, client6, vip6, "A", 142, 902, 0)
	c.seg(15, vip6, client6, "R", 902, 0, 0)
	// A request answered only after the client gave up: unanswered,
	// with the late answer and the client's reset kept.
	c.request(100, client(40002), vip)
	c.seg(1101, client(40002), vip, "FA", 141, 501, 0)
	c.seg(1800, vip, client(40002), "PA", 501, 141, 400)
	c.seg(1800, client(40002), vip, "R", 141, 0, 0)
	// Reset by the server before any answer.
	c.request(200, client(40003), vip)
	c.seg(202, vip, client(40003), "R", 501, 0, 0)
	// A SYN sent twice, never answered, then given up.
	c.seg(300, client(40004), vip, "S", 100, 0, 0)
	c.seg(1300, client(40004), vip, "S", 100, 0, 0)
	// The same tuple again later, answered: a new connection.
	c.answeredFrom(5000, client(40004), vip, 7000)
	// In flight when the capture ends: left out.
	c.seg(5100, client(40005), vip, "S", 100, 0, 0)

	res, err := Scan(bytes.NewReader(c.buf.Bytes()), 80)
	if err != nil {
		t.Fatal(err)
	}
	if res.Conns != 7 {
		t.Errorf("%d connections, want 7", res.Conns)
	}
	if res.LateResets != 1 {
		t.Errorf("%d late resets, want 1", res.LateResets)
	}
	var got []string
	for _, u := range res.Unanswered {
		got = append(got, u.Client.String())
	}
	if want := "198.51.100.100:40002 198.51.100.100:40003 198.51.100.100:40004"; strings.Join(got, " ") != want {
		t.Fatalf("unanswered %v, want %s", got, want)
	}
	late, rst, syns := res.Unanswered[0], res.Unanswered[1], res.Unanswered[2]
	if len(late.Packets) != 7 || late.Packets[5].Len != 400 || late.Packets[5].FromClient || !late.ResetByClient || late.ResetByServer {
		t.Errorf("the late answer's connection: %s (reset by client %v, server %v)", late, late.ResetByClient, late.ResetByServer)
	}
	if !rst.ResetByServer || rst.ResetByClient {
		t.Errorf("the server's reset: %s", rst)
	}
	if len(syns.Packets) != 2 || syns.Packets[1].Flags != "S" {
		t.Errorf("the unanswered SYNs: %s", syns)
	}
	if s := late.String(); !strings.Contains(s, "server>client [P.] seq 501 ack 141 len 400") {
		t.Errorf("String() = %s", s)
	}
}

func TestScanEnds(t *testing.T) {
	c := newCapture()
	c.answered(0, client(40001), vip)
	b := c.buf.Bytes()
	// A record cut short, as a capture still being written ends.
	res, err := Scan(bytes.NewReader(b[:len(b)-10]), 80)
	if err != nil || res.Conns != 1 || len(res.Unanswered) != 0 {
		t.Errorf("truncated: %+v, %v", res, err)
	}
	if _, err := Scan(bytes.NewReader([]byte("not a pcap file at all, no")), 80); err == nil {
		t.Error("a file that is not a capture was read")
	}
	raw := append([]byte(nil), b[:24]...)
	binary.LittleEndian.PutUint32(raw[20:24], 101) // raw IP
	if _, err := Scan(bytes.NewReader(raw), 80); err == nil || !strings.Contains(err.Error(), "link type 101") {
		t.Errorf("a raw-IP capture: %v", err)
	}
}

// TestScanCooked reads what tcpdump -i any writes (Linux cooked v2).
func TestScanCooked(t *testing.T) {
	c := newCapture()
	c.from = nodeA
	c.answered(0, client(40001), vip)
	c.seg(10, netip.AddrPortFrom(client6.Addr(), 40002), vip6, "S", 100, 0, 0)
	c.seg(1010, netip.AddrPortFrom(client6.Addr(), 40002), vip6, "S", 100, 0, 0)
	c.answered(3100, client(40003), vip) // the SYNs above are no longer in flight
	// Rewrite each Ethernet frame as an SLL2 one: a 20-byte header with
	// the protocol first.
	b := c.buf.Bytes()
	var out bytes.Buffer
	out.Write(b[:20])
	binary.Write(&out, binary.LittleEndian, uint32(276))
	for off := 24; off < len(b); {
		n := int(binary.LittleEndian.Uint32(b[off+8 : off+12]))
		frame := b[off+16 : off+16+n]
		rec := append([]byte(nil), b[off:off+16]...)
		binary.LittleEndian.PutUint32(rec[8:12], uint32(n+6))
		binary.LittleEndian.PutUint32(rec[12:16], binary.LittleEndian.Uint32(rec[12:16])+6)
		hdr := make([]byte, 20)
		copy(hdr[0:2], frame[12:14])
		hdr[11] = 6
		copy(hdr[12:18], frame[6:12])
		out.Write(rec)
		out.Write(hdr)
		out.Write(frame[14:])
		off += 16 + n
	}
	res, err := Scan(&out, 80)
	if err != nil {
		t.Fatal(err)
	}
	if res.Conns != 3 || len(res.Unanswered) != 1 || len(res.Unanswered[0].Packets) != 2 {
		t.Errorf("cooked capture: %d connections, unanswered %v", res.Conns, res.Unanswered)
	}
	if p := res.Unanswered[0].Packets[0]; p.From != nodeA {
		t.Errorf("cooked capture: the sender's address %s, want %s", p.From, nodeA)
	}
}

var (
	nodeA = MAC{0x02, 0, 0, 0, 0, 0xa}
	nodeB = MAC{0x02, 0, 0, 0, 0, 0xb}
)

// TestScanResetElsewhere: a reset from the server's address sent by
// another node than the one that answered the SYN, after the answer (the
// client's ACK reached the node the address moved to) or before it (the
// request did: the client's read fails), is told apart; a reset from the
// node that answered is not.
func TestScanResetElsewhere(t *testing.T) {
	c := newCapture()
	// Answered by A; the client's last ACK went to B, which reset it.
	c.from = nodeA
	c.request(0, client(40001), vip)
	c.seg(400, vip, client(40001), "PA", 501, 141, 400)
	c.seg(400, client(40001), vip, "A", 141, 901, 0)
	c.from = nodeB
	c.seg(400, vip, client(40001), "R", 901, 0, 0)
	// The handshake with A, the request to B: reset before any answer.
	c.from = nodeA
	c.request(10, client(40002), vip)
	c.from = nodeB
	c.seg(11, vip, client(40002), "R", 501, 0, 0)
	// Answered and reset late by A itself: not elsewhere.
	c.from = nodeA
	c.answered(20, client(40003), vip)
	c.seg(25, vip, client(40003), "R", 902, 0, 0)

	res, err := Scan(bytes.NewReader(c.buf.Bytes()), 80)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.ResetElsewhere) != 2 {
		t.Fatalf("reset elsewhere: %v, want 2", res.ResetElsewhere)
	}
	after, before := res.ResetElsewhere[0], res.ResetElsewhere[1]
	if after.Client != client(40001) || !after.Answered || after.AnsweredFrom != nodeA || after.ResetFrom != nodeB {
		t.Errorf("reset after the answer: %s", after.ElsewhereString())
	}
	if before.Client != client(40002) || before.Answered || before.ResetFrom != nodeB {
		t.Errorf("reset before the answer: %s", before.ElsewhereString())
	}
	if len(res.Unanswered) != 1 || res.Unanswered[0] != before {
		t.Errorf("unanswered %v, want the one reset before its answer", res.Unanswered)
	}
	if s := before.String(); !strings.Contains(s, "[R] seq 501 ack 0 len 0 from 02:00:00:00:00:0b") {
		t.Errorf("its packets: %s", s)
	}
	want := "198.51.100.100:40001 -> 198.51.100.120:80 answered by 02:00:00:00:00:0a, reset by 02:00:00:00:00:0b (answer before the reset: true)"
	if got := after.ElsewhereString(); got != want {
		t.Errorf("ElsewhereString() = %s, want %s", got, want)
	}
}

func TestReport(t *testing.T) {
	c := newCapture()
	for i := range 3 {
		c.seg(i, client(uint16(41000+i)), vip, "S", 100, 0, 0)
	}
	c.answered(5000, client(40001), vip)
	res, err := Scan(bytes.NewReader(c.buf.Bytes()), 80)
	if err != nil {
		t.Fatal(err)
	}
	got := Report("client.pcap", res, 2)
	want := "client.pcap: 4 connections, 3 without an answer, 0 resets after an answer, 0 reset by another node than the one that answered\n" +
		"198.51.100.100:41000 -> 198.51.100.120:80\n  21:06:40.000000 client>server [S] seq 100 ack 0 len 0\n" +
		"198.51.100.100:41001 -> 198.51.100.120:80\n  21:06:40.001000 client>server [S] seq 100 ack 0 len 0\n" +
		"... 1 more\n"
	if got != want {
		t.Errorf("Report:\n%s\nwant:\n%s", got, want)
	}
}
