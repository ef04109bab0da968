// Package proxy is the iptables service proxy that replaces kube-proxy
// (issue #5). Tracker keeps the model (Services, endpoints, this Node)
// fed by informers and tracks which Services changed; Syncer renders it
// with rules (pure) and loads it with one iptables-restore per family
// (a large full sync with iptables-nft in chunks), partial when only some Services changed, full at start, after a
// failure, when the canary chain is gone and every --full-sync-period
// (periodic --sync-period syncs in between check the canary); Loop
// paces the syncs. Around the rules it keeps the healthCheckNodePort
// servers, the proxy's /healthz, stale UDP conntrack entries
// (conntrack) and the metrics in step. Run wires it all to the API
// server; Cleanup removes what it installed. Subpackages: rules
// (rendering), tracer (packet simulation for tests), iptables and
// conntrack (the kernel, behind interfaces with fakes), healthcheck.
package proxy
