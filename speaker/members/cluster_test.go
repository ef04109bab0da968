package members

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests run real members over UDP and TCP on 127.0.0.1 with the
// default timers. They print the measured times and assert only generous
// bounds, because a loaded CI machine stretches everything.

const bound = 5 * time.Second

var testSecret = Secret("herald-test-secret-0123456789abcdef")

// freePort returns a port free for both TCP and UDP on 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// recorder keeps each member's events with their arrival time.
type recorder struct {
	mu sync.Mutex
	ev []timedEvent
}

type timedEvent struct {
	at time.Time
	Event
}

func (r *recorder) add(e Event) {
	r.mu.Lock()
	r.ev = append(r.ev, timedEvent{time.Now(), e})
	r.mu.Unlock()
}

// first returns the first event after since matching f.
func (r *recorder) first(since time.Time, f func(Event) bool) (timedEvent, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.ev {
		if !e.at.Before(since) && f(e.Event) {
			return e, true
		}
	}
	return timedEvent{}, false
}

type node struct {
	name string
	port int
	m    *Memberlist
	rec  *recorder
	msgs chan []byte
}

// logs collects every member's log output, to check it for the secret.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func start(t *testing.T, name string, port int, secret Secret, lg *logs, rejoin time.Duration) (*node, error) {
	t.Helper()
	n := &node{name: name, port: port, rec: &recorder{}, msgs: make(chan []byte, 16)}
	m, err := New(Config{
		NodeName:       name,
		BindAddr:       netip.MustParseAddr("127.0.0.1"),
		AdvertiseAddr:  netip.MustParseAddr("127.0.0.1"),
		BindPort:       port,
		Secret:         secret,
		Meta:           Meta{Interfaces: []string{"eth0"}},
		RejoinInterval: rejoin,
		OnEvent:        n.rec.add,
		OnMessage:      func(b []byte) { n.msgs <- b },
		Log:            slog.New(slog.NewTextHandler(lg, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		return nil, err
	}
	n.m = m
	t.Cleanup(func() { m.kill() })
	return n, nil
}

func mustStart(t *testing.T, name string, port int, lg *logs, rejoin time.Duration) *node {
	t.Helper()
	n, err := start(t, name, port, testSecret, lg, rejoin)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func addr(n *node) string { return fmt.Sprintf("127.0.0.1:%d", n.port) }

func names(c Cluster) []string {
	var out []string
	for _, m := range c.Members() {
		out = append(out, m.Name)
	}
	return out
}

// waitUntil polls f until it holds or bound passes, returning the time
// taken.
func waitUntil(t *testing.T, what string, f func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !f() {
		if time.Since(start) > bound {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

// waitEvent waits for an event matching f on each recorder and returns the
// times from since.
func waitEvent(t *testing.T, what string, since time.Time, f func(Event) bool, on ...*node) []time.Duration {
	t.Helper()
	var out []time.Duration
	for _, n := range on {
		var got timedEvent
		waitUntil(t, what+" at "+n.name, func() bool {
			var ok bool
			got, ok = n.rec.first(since, f)
			return ok
		})
		out = append(out, got.at.Sub(since))
	}
	return out
}

func leaveOf(name string) func(Event) bool {
	return func(e Event) bool { return e.Type == EventLeave && e.Member.Name == name }
}

func joinOf(name string) func(Event) bool {
	return func(e Event) bool { return e.Type == EventJoin && e.Member.Name == name }
}

func summary(ds []time.Duration) string {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("n=%d min %v median %v max %v", len(s), s[0].Round(time.Millisecond),
		s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

func TestClusterLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets and timers")
	}
	lg := &logs{}
	a := mustStart(t, "node-a", freePort(t), lg, time.Hour)
	b := mustStart(t, "node-b", freePort(t), lg, time.Hour)
	cPort := freePort(t)
	c := mustStart(t, "node-c", cPort, lg, time.Hour)

	// Peers may list themselves and unreachable or bad entries; the good
	// ones are still joined.
	if n, err := b.m.Join([]string{addr(a), addr(b)}); n != 1 || err != nil {
		t.Fatalf("b joins a: %d %v", n, err)
	}
	n, err := c.m.Join([]string{addr(a), addr(b), "not-an-ip"})
	if n != 2 || err == nil || !strings.Contains(err.Error(), "not-an-ip") {
		t.Fatalf("c joins a and b: %d %v", n, err)
	}
	all := []string{"node-a", "node-b", "node-c"}
	d := waitUntil(t, "3 members everywhere", func() bool {
		return reflect.DeepEqual(names(a.m), all) && reflect.DeepEqual(names(b.m), all) && reflect.DeepEqual(names(c.m), all)
	})
	t.Logf("3 members converged in %v", d.Round(time.Millisecond))
	for _, m := range a.m.Members() {
		if m.MetaErr != nil || !reflect.DeepEqual(m.Meta.Interfaces, []string{"eth0"}) {
			t.Errorf("member %+v", m)
		}
	}

	// Metadata: c's eth1 loses carrier.
	since := time.Now()
	want := Meta{Interfaces: []string{"eth0", "eth1"}, DownInterfaces: []string{"eth1"}}
	if err := c.m.UpdateMeta(want); err != nil {
		t.Fatal(err)
	}
	upd := waitEvent(t, "metadata update", since, func(e Event) bool {
		return e.Type == EventUpdate && e.Member.Name == "node-c" && reflect.DeepEqual(e.Member.Meta, want)
	}, a, b)
	t.Logf("metadata update seen after %v", upd)
	if i := slices.IndexFunc(a.m.Members(), func(m Member) bool { return m.Name == "node-c" }); i < 0 || !reflect.DeepEqual(a.m.Members()[i].Meta, want) {
		t.Errorf("a's Members does not show c's new metadata")
	}
	// Too large: refused, the old metadata stays.
	var many []string
	for i := range 60 {
		many = append(many, fmt.Sprintf("vlan%d", i))
	}
	if err := c.m.UpdateMeta(Meta{Interfaces: many}); err == nil {
		t.Error("oversized metadata accepted")
	}
	if got := c.m.Members()[2].Meta; !reflect.DeepEqual(got, want) {
		t.Errorf("c's metadata after a refused update: %v", got)
	}

	// Hard death (no leave), then a restart on the same address, several
	// times for a spread of figures.
	var detect, rejoin []time.Duration
	for trial := range 5 {
		since = time.Now()
		c.m.kill()
		detect = append(detect, waitEvent(t, "hard-dead c", since, leaveOf("node-c"), a, b)...)
		if slices.Contains(names(a.m), "node-c") {
			t.Fatalf("trial %d: c still in a's members after its leave event", trial)
		}
		if ev, ok := a.rec.first(since, leaveOf("node-c")); ok && ev.Member.Meta.Leaving {
			t.Errorf("trial %d: a death carried Leaving", trial)
		}
		since = time.Now()
		c = mustStart(t, "node-c", cPort, lg, time.Hour)
		if n, err := c.m.Join([]string{addr(a), addr(b)}); n != 2 || err != nil {
			t.Fatalf("trial %d: restarted c joins: %d %v", trial, n, err)
		}
		rejoin = append(rejoin, waitEvent(t, "restarted c", since, joinOf("node-c"), a, b)...)
		waitUntil(t, "c sees everyone", func() bool { return reflect.DeepEqual(names(c.m), all) })
	}
	t.Logf("hard death detected (kill → leave event at each survivor): %s; estimate %v", summary(detect), DefaultTimers().DetectionEstimate(3))
	t.Logf("restart seen (start → join event): %s", summary(rejoin))

	// A restart in place: the leave carries Restarting too.
	since = time.Now()
	if err := c.m.Restart(); err != nil {
		t.Errorf("Restart: %v", err)
	}
	waitEvent(t, "c restarting", since, leaveOf("node-c"), a, b)
	for _, n := range []*node{a, b} {
		if ev, ok := n.rec.first(since, leaveOf("node-c")); !ok || !ev.Member.Meta.Leaving || !ev.Member.Meta.Restarting {
			t.Errorf("the restart's leave event at %s does not carry Leaving and Restarting: %+v", n.m.cfg.NodeName, ev)
		}
	}
	since = time.Now()
	c = mustStart(t, "node-c", cPort, lg, time.Hour)
	if n, err := c.m.Join([]string{addr(a), addr(b)}); n != 2 || err != nil {
		t.Fatalf("c after its restart in place joins: %d %v", n, err)
	}
	waitEvent(t, "c back", since, joinOf("node-c"), a, b)
	waitUntil(t, "c sees everyone", func() bool { return reflect.DeepEqual(names(c.m), all) })

	// Graceful leave.
	since = time.Now()
	if err := c.m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	closeTook := time.Since(since)
	left := waitEvent(t, "c left", since, leaveOf("node-c"), a, b)
	t.Logf("graceful leave seen after %v (Close took %v)", left, closeTook.Round(time.Millisecond))
	for _, n := range []*node{a, b} {
		// The leave event carries the metadata that announced it, which
		// tells it from a death.
		if ev, ok := n.rec.first(since, leaveOf("node-c")); !ok || !ev.Member.Meta.Leaving || ev.Member.Meta.Restarting {
			t.Errorf("the graceful leave's event at %s does not carry Leaving alone: %+v", n.m.cfg.NodeName, ev)
		}
	}
	if err := c.m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := c.m.Join([]string{addr(a)}); err == nil {
		t.Error("Join after Close succeeded")
	}

	for _, s := range []string{string(testSecret), hex.EncodeToString(testSecret)} {
		if strings.Contains(lg.String(), s) {
			t.Error("the secret appears in the logs")
		}
	}
	key, _ := DeriveKey(testSecret)
	if strings.Contains(lg.String(), hex.EncodeToString(key[:])) {
		t.Error("the key appears in the logs")
	}
}

// TestRejoinHealsPartition: a member that restarts knowing nobody is
// found again by the others' periodic rejoin of their known peers.
func TestRejoinHealsPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets and timers")
	}
	lg := &logs{}
	const every = 200 * time.Millisecond
	a := mustStart(t, "node-a", freePort(t), lg, every)
	cPort := freePort(t)
	c := mustStart(t, "node-c", cPort, lg, every)
	if _, err := a.m.Join([]string{addr(c)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "joined", func() bool { return len(c.m.Members()) == 2 })
	c.m.kill()
	waitUntil(t, "c dead at a", func() bool { return len(a.m.Members()) == 1 })
	// While c is down, a's rejoin attempts fail quietly.
	time.Sleep(3 * every)
	since := time.Now()
	c = mustStart(t, "node-c", cPort, lg, every) // joins nobody itself
	healed := waitEvent(t, "a rejoins c", since, joinOf("node-a"), c)
	t.Logf("rejoin loop (every %v) merged the restarted member after %v", every, healed)
	waitUntil(t, "a sees c", func() bool { return len(a.m.Members()) == 2 })
}

// TestSend: a message sent to a member reaches its OnMessage whole,
// over the encrypted stream; a member not in the list is an error.
func TestSend(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets")
	}
	lg := &logs{}
	a := mustStart(t, "node-a", freePort(t), lg, 0)
	b := mustStart(t, "node-b", freePort(t), lg, 0)
	if _, err := a.m.Join([]string{addr(b)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "joined", func() bool { return len(a.m.Members()) == 2 && len(b.m.Members()) == 2 })
	msg := []byte(`{"k":"release","f":"node-a","t":"node-b","a":["198.51.100.1"]}`)
	sent := time.Now()
	if err := a.m.Send("node-b", msg); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-b.msgs:
		if !bytes.Equal(got, msg) {
			t.Fatalf("received %q, want %q", got, msg)
		}
		t.Logf("delivered in %v", time.Since(sent))
	case <-time.After(5 * time.Second):
		t.Fatal("the message did not arrive")
	}
	if err := a.m.Send("node-x", msg); err == nil || !strings.Contains(err.Error(), "node-x is not a live member") {
		t.Fatalf("send to a stranger: %v", err)
	}
	if strings.Contains(lg.String(), "release") {
		t.Fatalf("the message's content reached the logs:\n%s", lg.String())
	}
}

// TestWrongSecretCannotJoin: gossip is encrypted, so a member with a
// different secret is refused and neither side lists the other.
func TestWrongSecretCannotJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets and timers")
	}
	lg := &logs{}
	a := mustStart(t, "node-a", freePort(t), lg, time.Hour)
	b := mustStart(t, "node-b", freePort(t), lg, time.Hour)
	if _, err := b.m.Join([]string{addr(a)}); err != nil {
		t.Fatal(err)
	}
	x, err := start(t, "intruder", freePort(t), Secret("another-secret-0123456789abcdef"), lg, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	n, err := x.m.Join([]string{addr(a), addr(b)})
	if n != 0 || err == nil {
		t.Fatalf("member with another secret joined %d peers (err %v)", n, err)
	}
	t.Logf("refused: %v", err)
	time.Sleep(500 * time.Millisecond) // a few gossip and probe rounds
	if got := names(a.m); !reflect.DeepEqual(got, []string{"node-a", "node-b"}) {
		t.Errorf("a's members %v", got)
	}
	if got := names(x.m); !reflect.DeepEqual(got, []string{"intruder"}) {
		t.Errorf("intruder's members %v", got)
	}
}

func TestFake(t *testing.T) {
	var got []string
	f := NewFake("node1", Meta{Interfaces: []string{"eth0"}}, func(e Event) {
		got = append(got, fmt.Sprintf("%s %s %v", e.Type, e.Member.Name, e.Member.Meta.Interfaces))
	})
	f.Set(Member{Name: "node2"})
	f.Set(Member{Name: "node2", Meta: Meta{Interfaces: []string{"eth1"}}})
	f.Set(Member{Name: "node3"})
	if err := f.UpdateMeta(Meta{Interfaces: []string{"a/b"}}); err == nil {
		t.Error("fake accepted bad metadata")
	}
	if err := f.UpdateMeta(Meta{Interfaces: []string{"eth0"}, DownInterfaces: []string{"eth0"}}); err != nil {
		t.Error(err)
	}
	f.Remove("node2")
	f.Remove("node3")
	f.Remove("nobody")
	want := []string{"join node2 []", "update node2 [eth1]", "join node3 []", "update node1 [eth0]", "leave node2 [eth1]", "leave node3 []"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if m := f.Members(); len(m) != 1 || m[0].Meta.DownInterfaces[0] != "eth0" {
		t.Errorf("members %+v", m)
	}
	if _, err := f.Join([]string{"192.0.2.1"}); err != nil || f.Peers()[0] != "192.0.2.1" {
		t.Error("fake Join")
	}
	_ = f.Close()
	if _, err := f.Join(nil); err == nil {
		t.Error("fake Join after Close")
	}
}

// TestKeyRotation rotates the key of a live cluster in the three steps
// docs/install.md gives (add the new key, make it primary, remove the old
// one), one member at a time as a rolling update of the Secret reaches
// them: the members stay one cluster at every step, and only a member
// with the old key alone is refused at the end.
func TestKeyRotation(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets and timers")
	}
	lg := &logs{}
	oldKey, newKey := testSecret, Secret("herald-rotated-secret-0123456789")
	var ns []*node
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		ns = append(ns, mustStart(t, name, freePort(t), lg, time.Hour))
	}
	for _, n := range ns[1:] {
		if _, err := n.m.Join([]string{addr(ns[0])}); err != nil {
			t.Fatal(err)
		}
	}
	all := []string{"node-a", "node-b", "node-c"}
	whole := func(step string) {
		t.Helper()
		// A few probe and gossip rounds with the keys as they are.
		time.Sleep(500 * time.Millisecond)
		for _, n := range ns {
			if got := names(n.m); !reflect.DeepEqual(got, all) {
				t.Fatalf("%s: %s sees %v", step, n.name, got)
			}
		}
	}
	whole("before")
	steps := []struct {
		name           string
		primary        Secret
		extra          []Secret
		keysAfterwards int
	}{
		{"add the new key", oldKey, []Secret{newKey}, 2},
		{"make it primary", newKey, []Secret{oldKey}, 2},
		{"remove the old key", newKey, nil, 1},
	}
	for _, s := range steps {
		for i, n := range ns {
			if err := n.m.SetKeys(s.primary, s.extra); err != nil {
				t.Fatalf("%s on %s: %v", s.name, n.name, err)
			}
			if got := n.m.Keys(); got != s.keysAfterwards {
				t.Errorf("%s on %s: %d keys, want %d", s.name, n.name, got, s.keysAfterwards)
			}
			whole(fmt.Sprintf("%s, %d of 3 members done", s.name, i+1))
		}
	}
	x, err := start(t, "stale", freePort(t), oldKey, lg, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := x.m.Join([]string{addr(ns[0])}); n != 0 || err == nil {
		t.Errorf("a member with only the removed key joined %d (err %v)", n, err)
	}
	if err := ns[0].m.SetKeys(Secret("short"), nil); err == nil || ns[0].m.Keys() != 1 {
		t.Errorf("a too short key was taken: err %v, %d keys", err, ns[0].m.Keys())
	}
	for _, s := range []string{string(newKey), string(oldKey)} {
		if strings.Contains(lg.String(), s) {
			t.Error("a key appears in the logs")
		}
	}
}
