// Package speaker will be the node agent that makes assigned IPs reachable:
// layer 2 with memberlist election (issue #6) and BGP with GoBGP v4 (issue
// #7). It is empty until then.
package speaker
