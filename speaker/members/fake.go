package members

import (
	"errors"
	"slices"
	"strings"
	"sync"
)

// Fake is an in-memory Cluster for tests of the speaker: the test adds and
// removes members, and events are delivered synchronously, in order, on
// the calling goroutine.
type Fake struct {
	mu        sync.Mutex
	self      string
	members   map[string]Member
	peers     []string
	closed    bool
	restarted bool
	onEvent   func(Event)
	// JoinErr, when set, is what Join returns.
	JoinErr error
	// Keys are the key materials of the last SetKeys, primary first.
	Keys []Secret
	// OnSend, when set, receives what Send sends (a test delivers it to
	// the other speaker); Send fails for a member not in the list.
	OnSend func(to string, msg []byte)
}

var _ Cluster = (*Fake)(nil)

// NewFake returns a Fake whose only member is this node, with meta.
func NewFake(self string, meta Meta, onEvent func(Event)) *Fake {
	f := &Fake{self: self, members: map[string]Member{}, onEvent: onEvent}
	f.members[self] = Member{Name: self, Meta: meta}
	return f
}

// Join implements Cluster: it records the peers and joins nobody.
func (f *Fake) Join(peers []string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, errors.New("memberlist is closed")
	}
	f.peers = slices.Clone(peers)
	return 0, f.JoinErr
}

// Peers returns the peers of the last Join.
func (f *Fake) Peers() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.peers)
}

// Members implements Cluster.
func (f *Fake) Members() []Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Member, 0, len(f.members))
	for _, m := range f.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// UpdateMeta implements Cluster, with EncodeMeta's checks.
func (f *Fake) UpdateMeta(meta Meta) error {
	if _, err := EncodeMeta(meta); err != nil {
		return err
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return errors.New("memberlist is closed")
	}
	m := f.members[f.self]
	m.Meta = meta
	f.members[f.self] = m
	f.mu.Unlock()
	f.emit(Event{Type: EventUpdate, Member: m})
	return nil
}

// Close implements Cluster.
func (f *Fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// Send implements Cluster.
func (f *Fake) Send(to string, msg []byte) error {
	f.mu.Lock()
	_, ok := f.members[to]
	closed, onSend := f.closed, f.OnSend
	f.mu.Unlock()
	switch {
	case closed:
		return errors.New("memberlist is closed")
	case !ok:
		return errors.New(to + " is not a live member")
	}
	if onSend != nil {
		onSend(to, slices.Clone(msg))
	}
	return nil
}

// Restart implements Cluster.
func (f *Fake) Restart() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed, f.restarted = true, true
	return nil
}

// Restarted tells whether Restart was called.
func (f *Fake) Restarted() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restarted
}

// LeaveRestarting drops a member as a restart in place does: its leave
// event carries Leaving and Restarting.
func (f *Fake) LeaveRestarting(name string) {
	f.mu.Lock()
	if m, ok := f.members[name]; ok {
		m.Meta.Restarting = true
		f.members[name] = m
	}
	f.mu.Unlock()
	f.drop(name, true)
}

// Set adds a member (a join event) or replaces it (an update event).
func (f *Fake) Set(m Member) {
	f.mu.Lock()
	_, known := f.members[m.Name]
	f.members[m.Name] = m
	f.mu.Unlock()
	t := EventJoin
	if known {
		t = EventUpdate
	}
	f.emit(Event{Type: t, Member: m})
}

// Remove drops a member with a leave event, as a death does.
func (f *Fake) Remove(name string) { f.drop(name, false) }

// Leave drops a member as a graceful stop does: its leave event carries
// Leaving in the metadata.
func (f *Fake) Leave(name string) { f.drop(name, true) }

func (f *Fake) drop(name string, leaving bool) {
	f.mu.Lock()
	m, ok := f.members[name]
	delete(f.members, name)
	f.mu.Unlock()
	if !ok {
		return
	}
	m.Meta.Leaving = m.Meta.Leaving || leaving
	f.emit(Event{Type: EventLeave, Member: m})
}

func (f *Fake) emit(e Event) {
	if f.onEvent != nil {
		f.onEvent(e)
	}
}

// SetKeys implements Cluster: it checks the keys as the real one does and
// records them.
func (f *Fake) SetKeys(primary Secret, extra []Secret) error {
	if _, err := deriveKeys(primary, extra); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Keys = append([]Secret{primary}, extra...)
	return nil
}
