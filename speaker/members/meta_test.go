package members

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMetaRoundTrip(t *testing.T) {
	cases := []struct {
		in, want Meta
	}{
		{Meta{}, Meta{}},
		{Meta{Interfaces: []string{"eth1", "eth0", "eth1"}, DownInterfaces: []string{"eth1"}},
			Meta{Interfaces: []string{"eth0", "eth1"}, DownInterfaces: []string{"eth1"}}},
		{Meta{Interfaces: []string{"bond0.100", "enp3s0f1"}}, Meta{Interfaces: []string{"bond0.100", "enp3s0f1"}}},
		{Meta{Interfaces: []string{"eth0"}, Recovering: true}, Meta{Interfaces: []string{"eth0"}, Recovering: true}},
		{Meta{Interfaces: []string{"eth0"}, Leaving: true, Restarting: true}, Meta{Interfaces: []string{"eth0"}, Leaving: true, Restarting: true}},
		{Meta{Interfaces: []string{"eth0"}, Drained: true}, Meta{Interfaces: []string{"eth0"}, Drained: true}},
		{Meta{Interfaces: []string{"eth0"}, Releases: true}, Meta{Interfaces: []string{"eth0"}, Releases: true}},
		// Milliseconds, in UTC.
		{Meta{Interfaces: []string{"eth0"}, Recovering: true, CountedOutAt: time.Date(2026, 11, 28, 1, 2, 3, 456789000, time.FixedZone("x", 3600))},
			Meta{Interfaces: []string{"eth0"}, Recovering: true, CountedOutAt: time.Date(2026, 11, 28, 0, 2, 3, 456000000, time.UTC)}},
	}
	for _, c := range cases {
		b, err := EncodeMeta(c.in)
		if err != nil {
			t.Fatalf("EncodeMeta(%v): %v", c.in, err)
		}
		got, err := DecodeMeta(b)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("round trip of %v via %s: %v %v, want %v", c.in, b, got, err, c.want)
		}
	}
}

func TestMetaSizeLimit(t *testing.T) {
	names := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("vlan-iface-%04d", i)) // 15 characters
		}
		return out
	}
	// Find the largest count that fits, then check the next one fails
	// with a message a user can act on.
	fit := 0
	for n := 1; n < 100; n++ {
		b, err := EncodeMeta(Meta{Interfaces: names(n)})
		if err != nil {
			if !errors.Is(err, ErrMetaTooLarge) {
				t.Fatalf("%d interfaces: %v, want ErrMetaTooLarge", n, err)
			}
			for _, s := range []string{fmt.Sprint(n), "512", "L2Advertisements"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %s", err, s)
				}
			}
			break
		}
		if len(b) > MaxMetaSize {
			t.Fatalf("%d interfaces encoded to %d bytes without error", n, len(b))
		}
		fit = n
	}
	t.Logf("%d interfaces of 15 characters fit in %d bytes", fit, MaxMetaSize)
	if fit < 20 {
		t.Errorf("only %d interfaces fit; the encoding is wasteful", fit)
	}
	// Down interfaces count too.
	if _, err := EncodeMeta(Meta{Interfaces: names(fit), DownInterfaces: names(fit)}); !errors.Is(err, ErrMetaTooLarge) {
		t.Errorf("interfaces plus down interfaces over the limit: %v", err)
	}
}

func TestMetaBadInput(t *testing.T) {
	for _, name := range []string{"", "sixteen-chars-xx", "a/b", "a:b", "a b", ".", "..", "a\x00"} {
		if _, err := EncodeMeta(Meta{Interfaces: []string{name}}); err == nil {
			t.Errorf("EncodeMeta accepted interface %q", name)
		}
		if _, err := EncodeMeta(Meta{DownInterfaces: []string{name}}); err == nil {
			t.Errorf("EncodeMeta accepted down interface %q", name)
		}
	}
	for _, b := range []string{"{", "null", `"eth0"`, `{"v":2,"i":["eth0"]}`, `{"i":["eth0"]}`, `{"v":1,"i":"eth0"}`, strings.Repeat(" ", 600)} {
		if m, err := DecodeMeta([]byte(b)); err == nil {
			t.Errorf("DecodeMeta(%.40q) = %v, want an error", b, m)
		}
	}
	// Bad names from a peer are dropped, unknown fields ignored.
	m, err := DecodeMeta([]byte(`{"v":1,"i":["eth0","","x/y","waytoolonginterface"],"d":["eth0","eth0"],"future":true}`))
	if err != nil || !reflect.DeepEqual(m, Meta{Interfaces: []string{"eth0"}, DownInterfaces: []string{"eth0"}}) {
		t.Errorf("DecodeMeta kept %v %v", m, err)
	}
}

func FuzzDecodeMeta(f *testing.F) {
	for _, s := range []string{"", `{"v":1}`, `{"v":1,"i":["eth0"],"d":["eth1"]}`, `{"v":1,"i":[1,2]}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			return
		}
		for _, n := range append(m.Interfaces, m.DownInterfaces...) {
			if !validIface(n) {
				t.Fatalf("DecodeMeta kept invalid name %q", n)
			}
		}
	})
}

// A speaker of the release before Recovering sends no "r"; one that knows
// it reads such metadata as not recovering, and the older one ignores it.
func TestMetaRecoveringCompatible(t *testing.T) {
	got, err := DecodeMeta([]byte(`{"v":1,"i":["eth0"]}`))
	if err != nil || got.Recovering {
		t.Fatalf("metadata without r: %+v %v", got, err)
	}
	b, err := EncodeMeta(Meta{Interfaces: []string{"eth0"}})
	if err != nil || strings.Contains(string(b), `"r"`) || strings.Contains(string(b), `"o"`) {
		t.Fatalf("not recovering and never counted out must leave r and o out (the old layout): %s %v", b, err)
	}
	// A time before 1970 from a peer is no time.
	if got, err := DecodeMeta([]byte(`{"v":1,"i":["eth0"],"r":true,"o":-5}`)); err != nil || !got.CountedOutAt.IsZero() {
		t.Fatalf("negative o: %+v %v, want no time", got, err)
	}
}

// memberlist reports a refuted death only in its log; the writer turns
// that line into the callback and nothing else into it.
func TestLogWriterReportsDeclaredDead(t *testing.T) {
	var from []string
	w := logWriter{l: slog.New(slog.DiscardHandler), declaredDead: func(f string) { from = append(from, f) }}
	for _, line := range []string{
		"[WARN] memberlist: Refuting a suspect message (from: node2)\n",
		"[INFO] memberlist: Suspect node3 has failed, no acks received\n",
		"[WARN] memberlist: Refuting a dead message (from: node2)\n",
		"[WARN] memberlist: Refuting a dead message (from: node-a.example)\n",
		"[WARN] memberlist: Refuting a dead message\n",
	} {
		if _, err := w.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"node2", "node-a.example", ""}; !slices.Equal(from, want) {
		t.Fatalf("declaredDead called with %q, want %q (the dead messages only, with their senders)", from, want)
	}
}
