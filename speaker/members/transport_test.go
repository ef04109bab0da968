package members

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func testTransport(t *testing.T) *transport {
	t.Helper()
	tr, err := newTransport("127.0.0.1", 0, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown() })
	return tr
}

func (t *transport) udpAddr() string { return t.udp.LocalAddr().String() }

func receive(t *testing.T, tr *transport) *memberlist.Packet {
	t.Helper()
	select {
	case p := <-tr.PacketCh():
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no packet within 5s")
	}
	return nil
}

// Each packet arrives in a slice of its own size, and a later packet
// does not overwrite an earlier one: memberlist may queue a packet's
// bytes for its handoff goroutine.
func TestTransportPacketsAreOwnCopies(t *testing.T) {
	tr := testTransport(t)
	from := testTransport(t)
	first, second := bytes.Repeat([]byte{1}, 120), bytes.Repeat([]byte{2}, 300)
	for _, b := range [][]byte{first, second} {
		if _, err := from.WriteTo(b, tr.udpAddr()); err != nil {
			t.Fatal(err)
		}
	}
	p1, p2 := receive(t, tr), receive(t, tr)
	if !bytes.Equal(p1.Buf, first) || !bytes.Equal(p2.Buf, second) {
		t.Fatalf("got %d bytes of %v and %d of %v, want 120 of 1 and 300 of 2", len(p1.Buf), p1.Buf[:1], len(p2.Buf), p2.Buf[:1])
	}
	if cap(p1.Buf) > 1024 || cap(p2.Buf) > 1024 {
		t.Errorf("packets of 120 and 300 bytes held %d and %d bytes, want their size (NetTransport's 64 KiB each is what this transport avoids)", cap(p1.Buf), cap(p2.Buf))
	}
	if got, want := p1.From.String(), from.udpAddr(); got != want {
		t.Errorf("From = %s, want %s", got, want)
	}
}

func TestTransportStreams(t *testing.T) {
	tr := testTransport(t)
	from := testTransport(t)
	c, err := from.DialTimeout(tr.tcp.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	var s net.Conn
	select {
	case s = <-tr.StreamCh():
	case <-time.After(5 * time.Second):
		t.Fatal("no stream within 5s")
	}
	defer s.Close()
	b := make([]byte, 5)
	if _, err := io.ReadFull(s, b); err != nil || string(b) != "hello" {
		t.Fatalf("read %q, %v; want hello", b, err)
	}
}

func TestTransportAdvertiseAddr(t *testing.T) {
	tr := testTransport(t)
	port := tr.tcp.Addr().(*net.TCPAddr).Port
	ip, p, err := tr.FinalAdvertiseAddr("", 0)
	if err != nil || !ip.Equal(net.IPv4(127, 0, 0, 1)) || p != port {
		t.Errorf("bound address: got %v:%d, %v; want 127.0.0.1:%d", ip, p, err, port)
	}
	ip, p, err = tr.FinalAdvertiseAddr("198.51.100.11", 7946)
	if err != nil || len(ip) != 4 || !ip.Equal(net.IPv4(198, 51, 100, 11)) || p != 7946 {
		t.Errorf("configured address: got %v (%d bytes):%d, %v; want 198.51.100.11 in 4 bytes:7946", ip, len(ip), p, err)
	}
	if _, _, err := tr.FinalAdvertiseAddr("node1", 7946); err == nil {
		t.Error("advertise address node1: no error")
	}
	if _, err := tr.WriteTo([]byte{1}, "no-port"); err == nil {
		t.Error("WriteTo an address without a port: no error")
	}
}

func TestTransportShutdownStopsReaders(t *testing.T) {
	tr, err := newTransport("127.0.0.1", 0, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = tr.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return within 5s")
	}
}

// BenchmarkTransportReceive reports the bytes allocated per packet
// received, beside memberlist's NetTransport, which this one replaces.
func BenchmarkTransportReceive(b *testing.B) {
	b.Run("herald", func(b *testing.B) {
		tr, err := newTransport("127.0.0.1", 0, log.New(io.Discard, "", 0))
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Shutdown()
		benchReceive(b, tr, tr.udpAddr())
	})
	b.Run("memberlist.NetTransport", func(b *testing.B) {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, Logger: log.New(io.Discard, "", 0)})
		if err != nil {
			b.Fatal(err)
		}
		defer nt.Shutdown()
		benchReceive(b, nt, fmt.Sprintf("127.0.0.1:%d", nt.GetAutoBindPort()))
	})
}

func benchReceive(b *testing.B, tr memberlist.Transport, addr string) {
	from, err := net.Dial("udp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer from.Close()
	msg := make([]byte, 200)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := from.Write(msg); err != nil {
			b.Fatal(err)
		}
		<-tr.PacketCh()
	}
}

// oldSpeaker is a member as herald's speakers were before they had their
// own transport: memberlist's NetTransport, with LZW-compressed gossip.
type oldSpeaker struct{ meta []byte }

func (o *oldSpeaker) NodeMeta(int) []byte             { return o.meta }
func (o *oldSpeaker) NotifyMsg([]byte)                {}
func (o *oldSpeaker) GetBroadcasts(int, int) [][]byte { return nil }
func (o *oldSpeaker) LocalState(bool) []byte          { return nil }
func (o *oldSpeaker) MergeRemoteState([]byte, bool)   {}

// During a rolling upgrade the speakers of both kinds form one cluster:
// the wire format is memberlist's either way, and compressed messages
// are still read.
func TestJoinsASpeakerOfTheOldTransport(t *testing.T) {
	keys, err := deriveKeys(testSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	keyring, err := memberlist.NewKeyring(keys[1:], keys[0])
	if err != nil {
		t.Fatal(err)
	}
	meta, err := EncodeMeta(Meta{Interfaces: []string{"eth0"}})
	if err != nil {
		t.Fatal(err)
	}
	old := &oldSpeaker{meta: meta}
	oc := memberlist.DefaultLANConfig()
	oc.Name, oc.BindAddr, oc.BindPort = "old", "127.0.0.1", freePort(t)
	oc.AdvertisePort = oc.BindPort
	oc.Keyring, oc.Label, oc.GossipVerifyIncoming, oc.GossipVerifyOutgoing = keyring, label, true, true
	oc.EnableCompression = true
	oc.ProbeInterval, oc.GossipInterval = 100*time.Millisecond, 50*time.Millisecond
	oc.Delegate = old
	oc.Logger = log.New(io.Discard, "", 0)
	ml, err := memberlist.Create(oc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ml.Shutdown() })

	lg := &logs{}
	n := mustStart(t, "new", freePort(t), lg, time.Hour)
	if _, err := n.m.Join([]string{fmt.Sprintf("127.0.0.1:%d", oc.BindPort)}); err != nil {
		t.Fatal(err)
	}
	// The old member's metadata update travels as compressed gossip.
	old.meta, err = EncodeMeta(Meta{Interfaces: []string{"eth0", "eth1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ml.UpdateNode(time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var seen []string
		for _, m := range n.m.Members() {
			if m.Name == "old" {
				seen = m.Meta.Interfaces
			}
		}
		if ml.NumMembers() == 2 && len(seen) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: the old member sees %d members, the new one sees the old one's interfaces %v (want 2 members and [eth0 eth1]); log:\n%s", ml.NumMembers(), seen, lg)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// And the new member's update, sent uncompressed, reaches the old one.
	if err := n.m.UpdateMeta(Meta{Interfaces: []string{"eth0", "eth2"}}); err != nil {
		t.Fatal(err)
	}
	for {
		var seen []string
		for _, m := range ml.Members() {
			if m.Name == "new" {
				got, _ := DecodeMeta(m.Meta)
				seen = got.Interfaces
			}
		}
		if slices.Equal(seen, []string{"eth0", "eth2"}) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s the old member sees the new one's interfaces %v, want [eth0 eth2]; log:\n%s", seen, lg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
