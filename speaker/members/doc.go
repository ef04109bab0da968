// Package members is the membership of the speakers: which speakers are
// alive, and what each says about its node's interfaces. The layer-2
// election (speaker/layer2/election) counts only live members as candidates, so
// how fast a dead speaker drops out is how fast its IPs move.
//
// It wraps hashicorp/memberlist (SWIM failure detection plus gossip) with:
//
//   - encryption that is always on, with an AES-256 key derived by
//     HKDF-SHA256 from a Secret the controller creates (DeriveKey); the
//     secret and the key print as <redacted> everywhere;
//   - timers tuned for a LAN so that a hard-dead node is seen dead in about
//     half a second (Timers explains the arithmetic; all are configurable);
//   - a leave broadcast on Close, so a speaker that stops gracefully hands
//     its IPs over at once;
//   - a peer list from the caller (the speaker lists its peers from the
//     API), rejoined periodically, which heals partitions;
//   - node metadata (Meta) carrying the node's suitable interfaces and
//     those without carrier, checked against memberlist's 512-byte limit;
//   - events delivered in order from one goroutine, never from inside
//     memberlist's locks.
//
// The Cluster interface is what the speaker uses; Fake implements it in
// memory for tests.
package members
