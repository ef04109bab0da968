package members

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// MaxMetaSize is memberlist's limit on node metadata (memberlist.MetaMaxSize;
// memberlist panics past it, so it is checked here first).
const MaxMetaSize = 512

// metaVersion lets a later speaker change the layout while older ones are
// still in the cluster.
const metaVersion = 1

// Meta is what a speaker tells the others about its node through memberlist
// metadata: the interfaces it could announce on and those of them without
// carrier. The election needs both for every node (Node.Interfaces and
// Node.DownInterfaces), and no other source has them for remote nodes.
type Meta struct {
	// Interfaces are the node's suitable interfaces (up, not loopback, not
	// a bond slave or pod interface), with or without carrier.
	Interfaces []string
	// DownInterfaces are the suitable interfaces without carrier.
	DownInterfaces []string
	// Recovering: the cluster declared this speaker dead, or it was
	// isolated, lately; the others then prefer any other candidate.
	Recovering bool
	// CountedOutAt is when the cluster last counted this speaker out, by
	// its clock, to the millisecond (zero: never); the election treats
	// speakers counted out together as peers.
	CountedOutAt time.Time
	// Leaving: the speaker is stopping gracefully and leaves next; the
	// others then forget it instead of counting it among the speakers
	// that may be alive behind a partition.
	Leaving bool
	// Restarting: set with Leaving when the speaker stops only to be
	// replaced on the same node (a rolling update), whose proxy rules stay
	// in the kernel. The others keep electing it for their restart hold
	// instead of taking its addresses over, and moving them back when the
	// new speaker joins.
	Restarting bool
	// Drained: the node carries herald drain's mark; the others then
	// elect it only for addresses no other node may announce, and take
	// the rest over while it still answers.
	Drained bool
	// Releases: the speaker tells the new winner of an address it stops
	// answering for that it has stopped (speaker/layer2/release), so the
	// new winner may wait for that before it answers.
	Releases bool
}

// wireMeta is compact because 512 bytes is little: with 15-character
// names about 25 interfaces fit.
type wireMeta struct {
	V    int      `json:"v"`
	Up   []string `json:"i,omitempty"`
	Down []string `json:"d,omitempty"`
	// Older speakers ignore the field: to them a recovering speaker is
	// an ordinary candidate.
	Recovering bool `json:"r,omitempty"`
	// Unix milliseconds. Older speakers ignore it: to them every
	// recovering speaker ranks after every healthy one.
	CountedOutAt int64 `json:"o,omitempty"`
	// Older speakers ignore it too: to them a leave is a leave.
	Leaving bool `json:"l,omitempty"`
	// Older speakers ignore it: to them a restart is a leave, as before.
	Restarting bool `json:"rs,omitempty"`
	// Older speakers ignore it: to them a drained node is an ordinary
	// candidate (upgrade every speaker before draining).
	Drained bool `json:"dr,omitempty"`
	// Older speakers ignore it: they answer at once what they win.
	Releases bool `json:"rl,omitempty"`
}

// ErrMetaTooLarge is returned (wrapped) when the metadata does not fit.
var ErrMetaTooLarge = errors.New("node metadata too large")

// maxIfaceName is Linux's IFNAMSIZ-1.
const maxIfaceName = 15

func validIface(s string) bool {
	return s != "" && len(s) <= maxIfaceName && s != "." && s != ".." &&
		!strings.ContainsAny(s, "/: \t\n\r\x00")
}

func normalize(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}

// EncodeMeta encodes m, sorted and without duplicates, and fails with
// ErrMetaTooLarge when it exceeds MaxMetaSize and with a named error for an
// interface name Linux would not accept.
func EncodeMeta(m Meta) ([]byte, error) {
	for _, l := range [][]string{m.Interfaces, m.DownInterfaces} {
		for _, n := range l {
			if !validIface(n) {
				return nil, fmt.Errorf("node metadata: invalid interface name %q", n)
			}
		}
	}
	b, err := json.Marshal(wireMeta{V: metaVersion, Up: normalize(m.Interfaces), Down: normalize(m.DownInterfaces), Recovering: m.Recovering, CountedOutAt: unixMilli(m.CountedOutAt), Leaving: m.Leaving, Restarting: m.Restarting, Drained: m.Drained, Releases: m.Releases})
	if err != nil {
		return nil, fmt.Errorf("node metadata: %w", err)
	}
	if len(b) > MaxMetaSize {
		return nil, fmt.Errorf("%w: %d interfaces (%d without carrier) take %d bytes, memberlist allows %d; publish only the interfaces the L2Advertisements name",
			ErrMetaTooLarge, len(m.Interfaces), len(m.DownInterfaces), len(b), MaxMetaSize)
	}
	return b, nil
}

// DecodeMeta decodes a peer's metadata. Empty metadata is an empty Meta (a
// speaker that publishes no interfaces can win no IP); anything malformed
// is an error, and invalid names are dropped rather than trusted.
func DecodeMeta(b []byte) (Meta, error) {
	if len(b) == 0 {
		return Meta{}, nil
	}
	if len(b) > MaxMetaSize {
		return Meta{}, fmt.Errorf("%w: %d bytes", ErrMetaTooLarge, len(b))
	}
	var w wireMeta
	if err := json.Unmarshal(b, &w); err != nil {
		return Meta{}, fmt.Errorf("node metadata: %w", err)
	}
	if w.V != metaVersion {
		return Meta{}, fmt.Errorf("node metadata version %d, this speaker reads %d", w.V, metaVersion)
	}
	keep := func(l []string) []string {
		var out []string
		for _, n := range l {
			if validIface(n) {
				out = append(out, n)
			}
		}
		return normalize(out)
	}
	return Meta{Interfaces: keep(w.Up), DownInterfaces: keep(w.Down), Recovering: w.Recovering, CountedOutAt: fromUnixMilli(w.CountedOutAt), Leaving: w.Leaving, Restarting: w.Restarting, Drained: w.Drained, Releases: w.Releases}, nil
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// fromUnixMilli reads a peer's time; a negative one is not trusted.
func fromUnixMilli(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
