// Package speaker is `herald speaker`, the node agent that makes assigned
// LoadBalancer IPs reachable from outside the cluster: over layer 2
// (ARP/NDP) and over BGP.
//
// One speaker runs on every node (a hostNetwork DaemonSet). The speakers
// form a memberlist cluster (speaker/members), encrypted with a key
// derived from the Secret the controller creates. On every change of
// their inputs — Services and their EndpointSlices, Nodes, the herald.io
// configuration, the members and this node's links — each runs one
// round (Speaker.Sync):
//
//  1. partition safety (speaker/partition) decides how far this node may
//     go: whether its view of the cluster holds back (a minority that
//     the heartbeat Lease shows isolated), whether it is recovering, which
//     members are held for a restart in place, which addresses wait for
//     a takeover check or for the node's proxy;
//  2. every protocol runs on that round, as equals behind one interface
//     (protocol): layer 2 (layer2.go: the pure election of
//     speaker/layer2/plan, then the ARP/NDP responders of speaker/layer2;
//     an address moving between two live speakers is handed off by a
//     message, speaker/layer2/release, and its connections forwarded,
//     speaker/handover) and BGP (bgpproto.go: speaker/bgp/plan, applied
//     by speaker/bgp);
//  3. the one StatusWriter gets what they announce: ServiceAnnouncements
//     and this node's NodeAnnouncement.
//
// Everything with a side effect on the kernel, the network or the API
// server is behind an interface (Links, Responder, StatusSink, Source,
// members.Cluster, partition.Check, partition.ProxyGate, the BGP router)
// with a fake in the tests. Run wires the real ones. By default the
// speaker also runs herald's service proxy (package proxy) in its own
// process, one proxy per node.
package speaker
