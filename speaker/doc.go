// Package speaker is `herald speaker`, the node agent that makes assigned
// LoadBalancer IPs reachable on the LAN over layer 2 (issue #6; BGP is
// issue #7).
//
// One speaker runs on every node (a hostNetwork DaemonSet). The speakers
// form a memberlist cluster (speaker/members), encrypted with a key
// derived from the Secret the controller creates. On every change of
// their inputs — Services and their EndpointSlices, Nodes, the herald.io
// configuration, the members and this node's links — each runs the same
// pure election (speaker/layer2/plan over speaker/layer2/election), so they agree
// on one winner per IP without talking, and brings the node in line with
// the result: the set of IPs the ARP/NDP responders (speaker/layer2)
// answer for, gratuitous announcements for what it gained, its memberlist
// metadata (its interfaces and which have no carrier), ServiceAnnouncement
// objects and events on the Services, and metrics.
//
// Speaker is that loop; everything with a side effect on the kernel, the
// network or the API server is behind an interface (Links, Responder,
// StatusSink, Source, members.Cluster) with a fake in the tests. Run wires
// the real ones. By default the speaker also runs herald's service proxy
// (package proxy) in its own process, one proxy per node.
package speaker
