// Package proxy is the service proxy that replaces kube-proxy, in two
// modes: iptables (the default) and nftables. Tracker keeps the model
// (Services, endpoints, this Node) fed by informers and tracks which
// Services changed; Syncer renders it with rules (pure) and loads it per
// address family through the family's Backend (IPTablesBackend,
// NFTBackend): with one iptables-restore (a large full sync with
// iptables-nft in chunks) or one nftables transaction over netlink,
// partial when only some Services changed, full at start, after a
// failure, when the canary is gone and every --full-sync-period
// (periodic --sync-period syncs in between check the canary); Loop paces
// the syncs. Around the rules it keeps the healthCheckNodePort servers,
// the proxy's /healthz, stale UDP conntrack entries and kube-proxy's
// conntrack settings (conntrack), and the metrics in step. Run wires it
// all to the API server; RemoveRules and --cleanup remove what it
// installed. Subpackages: rules (rendering, both modes), internal/tracer
// (packet simulation for tests), iptables, nft and conntrack (the
// kernel, behind interfaces with fakes), healthcheck.
package proxy
