// Package proxy will be the iptables service proxy that replaces kube-proxy
// (issue #5). It is empty until then.
package proxy
