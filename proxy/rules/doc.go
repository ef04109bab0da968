// Package rules renders the desired state of Services and endpoints for
// both proxy modes: iptables-restore input the way kube-proxy's iptables
// mode does, with a HERALD- chain prefix (Render), and an nftables table
// of herald's own (RenderNFT). Each Service port's decisions are made
// once (planService, serviceplan.go) and written by both: iptables.go
// (and iptables_prune.go) for the first, nft.go and nft_patch.go for the
// second. It is pure: plain Go model types in, text or nft objects out;
// no Kubernetes API types, no side effects. The iptables layout follows;
// nft.go describes the table.
//
// Layout (nat table; filter in brackets):
//
//	PREROUTING, OUTPUT -> HERALD-SERVICES            one rule per cluster/external/LB IP:
//	    "ns/svc:port cluster IP"      -> HERALD-SVC-<h>  (iTP=Local: HERALD-SVL-<h>)
//	    "ns/svc:port external IP"     -> HERALD-EXT-<h>
//	    "ns/svc:port loadbalancer IP" -> HERALD-EXT-<h>  (or HERALD-FW-<h> with source ranges)
//	    last: addrtype LOCAL          -> HERALD-NODEPORTS -> HERALD-EXT-<h> per NodePort
//	          (with NodeConfig.NodePortAddresses: -d <address> per allowed address)
//	HERALD-SVC-<h>  ! -s <cluster CIDR> -d <cluster IP> -> HERALD-MARK-MASQ,
//	                then -m statistic 1/(n-i) -> HERALD-SEP-<e> for every usable endpoint
//	                (those the topology hints leave for this node or zone: topology.go)
//	HERALD-SVL-<h>  the same over this node's endpoints only
//	HERALD-EXT-<h>  eTP=Cluster: mark for SNAT, -> SVC
//	                eTP=Local: pods -> SVC; node (src LOCAL) -> mark, SVC; others -> SVL
//	HERALD-FW-<h>   -s <allowed range> -> EXT; the rest falls through to
//	                [HERALD-PROXY-FIREWALL] DROP
//	HERALD-SEP-<e>  -s <endpoint> -> MARK-MASQ (hairpin); DNAT --to-destination ip:port
//	POSTROUTING -> HERALD-POSTROUTING: marked packets lose the mark and are MASQUERADEd
//	[HERALD-SERVICES]           REJECT (no endpoints) / DROP (iTP=Local, none here) cluster IPs
//	[HERALD-EXTERNAL-SERVICES]  the same for NodePorts (on the addresses that serve them),
//	                            external and LB IPs (eTP=Local: DROP)
//	[HERALD-NODEPORTS]          ACCEPT healthCheckNodePorts
//	[HERALD-FORWARD]            ACCEPT marked and established forwarded traffic
//
// <h> is a hash of "ns/name:port" and the protocol, shared by a port's SVC,
// SVL, EXT and FW chains; <e> also covers the endpoint. Names are stable, so a
// partial render (RenderWith with Options.Changed) can rewrite only the
// chains of changed Services plus the dispatch chains and the filter table,
// like kube-proxy's partial syncs. The hooks from built-in chains are not in
// the restore text; Jumps lists them for the syncer.
package rules
