// Package controller is `herald controller`: it assigns external IPs from
// IPAddressPools to LoadBalancer Services.
//
// The allocator (package allocator) decides; this package feeds it and
// writes the outcome. It watches Services, Namespaces (their labels feed
// pools' namespaceSelectors), the herald.io configuration kinds and the
// Secrets of herald's namespace, parses the configuration with
// config.Parse on every change, and hands the pools to the allocator. Each
// Service is mapped to an allocator request (Request), assigned, and its
// status.loadBalancer.ingress and herald.io/ip-allocated-from-pool
// annotation are written, with the events IPAllocated, AllocationFailed
// and IPReleased.
//
// On start (and on taking over the Lease) nothing is assigned before
// every handled Service's status IPs are adopted, oldest Service first,
// so a restart never moves an IP. Only the replica holding the Lease
// runs the controller; the Lease identity is the pod's name, so a
// container restarted by the kubelet takes its Lease back at once (the
// kubelet restarts a container only after the previous one died).
//
// The status of every configuration object (the Valid condition from the
// parser's problems, and for pools the address counts) is written at
// most once per --status-interval and only when it changed.
package controller
