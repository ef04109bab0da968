// Package proxy is the iptables service proxy that replaces kube-proxy
// (issue #5). Its parts live in subpackages: rules renders the desired
// iptables-restore text from plain model types (pure), tracer simulates
// packets through that text for tests, healthcheck serves the
// healthCheckNodePorts and /healthz; the syncer is still to come.
package proxy
