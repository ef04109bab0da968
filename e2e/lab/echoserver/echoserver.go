// Package echoserver answers HTTP requests the way the echoserver:1.4
// image (registry.k8s.io/echoserver:1.4, nginx with a Lua handler) does:
// a plain-text page listing the client's address, the request line and
// the request headers. The Kubernetes "Using Source IP" tutorial reads
// `client_address=` from that page, so the lab runs this handler wherever
// a pod asks for that image.
package echoserver

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
)

// DefaultPort is where the real image listens.
const DefaultPort = 8080

// ServerVersion is what the page reports under SERVER VALUES (the real
// image reports its nginx and lua versions; this one says what it is).
const ServerVersion = "herald-lab echoserver (answers like echoserver:1.4)"

// MaxBody bounds how much of a request body is echoed back.
const MaxBody = 1 << 20

// Handler echoes every request, whatever its method or path.
type Handler struct {
	// ServerPort is reported in request_uri, like nginx's $server_port.
	// Zero: taken from the local address of the connection.
	ServerPort int
}

// Page renders the echo page for r (its body must still be unread).
func (h Handler) Page(r *http.Request) string {
	var b strings.Builder
	b.WriteString("CLIENT VALUES:\n")
	fmt.Fprintf(&b, "client_address=%s\n", clientAddress(r.RemoteAddr))
	fmt.Fprintf(&b, "command=%s\n", r.Method)
	uri := r.URL.RequestURI()
	fmt.Fprintf(&b, "real path=%s\n", uri)
	query := r.URL.RawQuery
	if query == "" {
		query = "nil" // what the Lua handler prints for an absent query
	}
	fmt.Fprintf(&b, "query=%s\n", query)
	fmt.Fprintf(&b, "request_version=%d.%d\n", r.ProtoMajor, r.ProtoMinor)
	fmt.Fprintf(&b, "request_uri=http://%s:%s%s\n", hostOnly(r.Host), h.port(r), uri)
	b.WriteString("\nSERVER VALUES:\n")
	fmt.Fprintf(&b, "server_version=%s\n", ServerVersion)
	b.WriteString("\nHEADERS RECEIVED:\n")
	headers := map[string]string{}
	for k, v := range r.Header {
		headers[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	if r.Host != "" {
		headers["host"] = r.Host // net/http moves Host out of Header
	}
	keys := make([]string, 0, len(headers))
	for k := range headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, headers[k])
	}
	b.WriteString("BODY:\n")
	body, _ := io.ReadAll(io.LimitReader(r.Body, MaxBody))
	if len(body) == 0 {
		b.WriteString("-no body in request-")
	} else {
		b.Write(body)
	}
	return b.String()
}

// ServeHTTP writes the page with status 200.
func (h Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	page := h.Page(r)
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, page)
}

func (h Handler) port(r *http.Request) string {
	if h.ServerPort != 0 {
		return fmt.Sprint(h.ServerPort)
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if _, p, err := net.SplitHostPort(a.String()); err == nil {
			return p
		}
	}
	return fmt.Sprint(DefaultPort)
}

// clientAddress is the peer's IP without the port, as nginx's
// $remote_addr; IPv4-mapped IPv6 peers are shown as IPv4.
func clientAddress(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	if ip := net.ParseIP(host); ip != nil {
		if v4 := ip.To4(); v4 != nil {
			return v4.String()
		}
		return ip.String()
	}
	return host
}

// hostOnly is the Host header without its port, lower-cased (nginx's
// $host).
func hostOnly(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(strings.Trim(host, "[]"))
}
