package nft_test

import (
	"math/bits"
	"net"
	"net/netip"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/herald-lb/herald/internal/ipfamily"
	"github.com/herald-lb/herald/proxy/maglev"
	"github.com/herald-lb/herald/proxy/nft"
)

// TestKernelPins programs direct server return's pinning through herald's
// netlink encoding (root, a scratch namespace): a raw-priority chain that
// takes a flow's mark from a dynamic map of flows, else from the table by
// MarkHash, and pins it (UpdateMap). Every flow's pinned mark must be the
// one Go computes for its slot; after the table changes, the flows
// already seen keep their marks and new flows get the new table's, in
// both families: what keeps connections where they went while endpoints
// change (#35).
func TestKernelPins(t *testing.T) {
	in, nsFd := toolNetNS(t)
	in("ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	in("ip", "link", "set", "v0", "up")
	in("ip", "link", "set", "v1", "up")
	in("ip", "addr", "add", "198.18.0.1/24", "dev", "v0")
	in("ip", "addr", "add", "2001:db8:18::1/64", "dev", "v0", "nodad")
	const seed, port, mod, mask = 0x5eed1234, 5000, 401, 0x00ff0000
	k := &nft.Kernel{NetNS: nsFd}
	for _, fam := range []struct {
		f        ipfamily.Family
		src, dst string
	}{
		{ipfamily.IPv4, "198.18.0.1", "198.18.0.100"},
		{ipfamily.IPv6, "2001:db8:18::1", "2001:db8:18::100"},
	} {
		markOf := func(slot uint32) uint32 { return (slot%3 + 1) << 16 }
		marks := &nft.Set{Name: "marks", Key: nft.KeyType{nft.Slot}, Marks: true}
		for slot := range uint32(mod) {
			marks.Elements = append(marks.Elements, nft.Element{Key: nft.Key{Slot: slot}, Mark: markOf(slot)})
		}
		pins := &nft.Set{Name: "pins", Key: nft.FlowKey, Marks: true, Dynamic: true, Timeout: 600e9, Size: 1024}
		dst := netip.MustParseAddr(fam.dst)
		table := &nft.Table{Family: fam.f, Sets: []*nft.Set{marks, pins}, Chains: []*nft.Chain{{
			Name: "raw", Base: &nft.Base{Type: nft.TypeFilter, Hook: nft.HookOutput, Priority: nft.PriorityRaw},
			Rules: []nft.Rule{
				{Exprs: []nft.Expr{nft.MatchAddr{Field: nft.Daddr, Prefix: netip.PrefixFrom(dst, dst.BitLen()), Not: true}, nft.Verdict{Kind: nft.Return}}},
				{Exprs: []nft.Expr{nft.MarkLookup{Key: nft.FlowKey, Map: "pins"}}},
				{Exprs: []nft.Expr{nft.MatchMarkValue{Mask: mask}, nft.MarkHash{Mod: mod, Seed: seed, Map: "marks"}}},
				{Exprs: []nft.Expr{nft.MatchMark{Bit: mask}, nft.UpdateMap{Key: nft.FlowKey, Map: "pins"}}},
			},
		}}}
		table.Sort()
		if err := k.Apply(fam.f, table, nft.Diff(nil, table, nft.Recreate)); err != nil {
			t.Fatalf("%s: %v", fam.f, err)
		}
		send := func(from, n int) {
			t.Helper()
			if err := sendFrom(nsFd, netip.MustParseAddr(fam.src), from, n, netip.AddrPortFrom(dst, port)); err != nil {
				t.Fatal(err)
			}
		}
		want := func(sport int, tableMark func(uint32) uint32) uint32 {
			h, _ := maglev.FlowHash(netip.AddrPortFrom(netip.MustParseAddr(fam.src), uint16(sport)), netip.AddrPortFrom(dst, port), seed)
			return tableMark(maglev.Scale(h, mod))
		}
		send(40000, 60)
		got := pinned(t, in, fam.f)
		check := func(what string, from, n int, tableMark func(uint32) uint32) {
			t.Helper()
			bad := 0
			for p := from; p < from+n; p++ {
				if w := want(p, tableMark); got[p] != w {
					bad++
					if bad <= 3 {
						t.Errorf("%s %s: sport %d pinned %#x, want %#x", fam.f, what, p, got[p], w)
					}
				}
			}
			t.Logf("%s %s: %d flows, %d pins differ from Go's", fam.f, what, n, bad)
		}
		check("first packets", 40000, 60, markOf)

		// The table changes: every slot to one mark. The flows seen keep
		// theirs; new ones take the new table's.
		next := &nft.Table{Family: fam.f, Chains: table.Chains, Sets: []*nft.Set{pins, {Name: "marks", Key: marks.Key, Marks: true}}}
		for _, e := range marks.Elements {
			next.Sets[1].Elements = append(next.Sets[1].Elements, nft.Element{Key: e.Key, Mark: 0x00040000})
		}
		next.Sort()
		if err := k.Apply(fam.f, next, nft.Diff(table, next, nft.Full)); err != nil {
			t.Fatal(err)
		}
		send(40000, 60)
		send(41000, 20)
		got = pinned(t, in, fam.f)
		check("after the table changed, flows seen", 40000, 60, markOf)
		check("after the table changed, new flows", 41000, 20, func(uint32) uint32 { return 0x00040000 })
		if len(got) != 80 {
			t.Errorf("%s: %d pins, want 80", fam.f, len(got))
		}
	}
}

// sendFrom sends one UDP datagram to dst from each source port from,
// from+1, ... from+n-1 of src, inside the network namespace nsFd: each
// port one flow.
func sendFrom(nsFd int, src netip.Addr, from, n int, dst netip.AddrPort) error {
	errc := make(chan error, 1)
	go func() {
		// The thread enters the namespace and is never reused: it ends
		// with the goroutine, still locked.
		runtime.LockOSThread()
		if err := unix.Setns(nsFd, unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		for p := from; p < from+n; p++ {
			c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, uint16(p))), net.UDPAddrFromAddrPort(dst))
			if err != nil {
				errc <- err
				return
			}
			_, err = c.Write([]byte("x"))
			c.Close()
			if err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	return <-errc
}

var pinElement = regexp.MustCompile(`\. (\d+) \. [0-9a-f.:]+ \. 5000 (?:timeout \S+ )?(?:expires \S+ )?: (0x[0-9a-f]+)`)

// pinned reads the pins map: source port -> mark (on a little-endian
// machine).
func pinned(t *testing.T, in func(...string) string, f ipfamily.Family) map[int]uint32 {
	t.Helper()
	out := in("nft", "list", "map", nft.FamilyKeyword(f), nft.TableName, "pins")
	got := map[int]uint32{}
	for _, m := range pinElement.FindAllStringSubmatch(strings.ReplaceAll(out, "\n", " "), -1) {
		p, _ := strconv.Atoi(m[1])
		v, _ := strconv.ParseUint(m[2], 0, 32)
		// The kernel holds the mark as the register had it, in host
		// order; nft lists a map's mark data, for a map it did not
		// declare itself, as if it were big-endian.
		got[p] = bits.ReverseBytes32(uint32(v))
	}
	if len(got) == 0 {
		t.Fatalf("no pins read from:\n%s", out)
	}
	return got
}
