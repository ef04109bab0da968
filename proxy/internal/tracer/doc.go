// Package tracer is the proxy's test simulator, internal because only the
// proxy's own tests use it. It reads iptables-restore text with
// iptables.Lines, parses the rules (the subset herald's rules package
// emits) and simulates a connection's first packet through the netfilter
// hooks it would traverse, reporting every possible outcome: DNAT
// destination, masquerade, ACCEPT/DROP/REJECT. -m statistic and -m recent
// --rcheck are treated as branches, so a Service with n endpoints yields n
// outcomes (with their probabilities) instead of one random pick.
//
// Hooks simulated per origin of the packet:
//
//	network or local pod: nat PREROUTING, then filter INPUT (local destination)
//	                      or filter FORWARD + nat POSTROUTING
//	the node itself:      nat OUTPUT, filter OUTPUT, nat POSTROUTING,
//	                      then filter INPUT if the destination is local
//
// It models a new connection: conntrack state NEW, no prior recent-list
// entries (an --rcheck branch marks the outcome as Affinity).
package tracer
