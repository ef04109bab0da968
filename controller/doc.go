// Package controller will assign external IPs to LoadBalancer Services from
// IPAddressPools (issue #4): a pure allocator, the Service reconciler, pool
// status, events and metrics. It is empty until then.
package controller
