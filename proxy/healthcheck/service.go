// Package healthcheck serves what load balancers and kubelets ask the
// proxy: one HTTP server per Service's healthCheckNodePort, answering
// whether this node has local endpoints (200) or not (503), and the
// proxy's own /healthz and /livez.
package healthcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"
)

// ServiceKey names a Service.
type ServiceKey struct {
	Namespace, Name string
}

func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

// ListenFunc opens a listener; tests pass one that binds to loopback.
type ListenFunc func(network, address string) (net.Listener, error)

// Bind is one address a healthCheckNodePort server listens on: Host ""
// with Network "tcp" is every address of both families.
type Bind struct {
	Network, Host string
}

// AllAddresses is where the servers listen without --nodeport-addresses.
var AllAddresses = []Bind{{Network: "tcp"}}

// ServiceServer runs the healthCheckNodePort servers of the Services with
// externalTrafficPolicy Local.
type ServiceServer struct {
	listen ListenFunc
	// binds are the addresses every server listens on.
	binds []Bind
	// healthy reports whether the proxy itself is healthy; a node whose
	// proxy is stuck must not attract traffic even with endpoints.
	healthy func() bool

	mu       sync.Mutex
	services map[ServiceKey]*hcService
}

type hcService struct {
	port int
	// listeners are closed with the server too: one its Serve has not
	// picked up yet would stay open otherwise.
	listeners []net.Listener
	server    *http.Server
	// local is the number of ready local endpoints.
	local int
}

// NewServiceServer makes a server; listen nil means net.Listen on all
// addresses, healthy nil means always healthy.
func NewServiceServer(listen ListenFunc, healthy func() bool) *ServiceServer {
	if listen == nil {
		listen = net.Listen
	}
	if healthy == nil {
		healthy = func() bool { return true }
	}
	return &ServiceServer{listen: listen, healthy: healthy, services: map[ServiceKey]*hcService{}}
}

// SyncServices makes the set of servers match ports (Service →
// healthCheckNodePort), each listening on binds (nil: AllAddresses): new
// ones are opened, gone or moved ones closed, and every one again when
// binds changed. A port that cannot be opened on one of binds is
// reported in the error and leaves every other Service's server alone.
func (s *ServiceServer) SyncServices(ports map[ServiceKey]int, binds []Bind) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(binds) == 0 && ports != nil {
		binds = AllAddresses
	}
	rebind := !slices.Equal(binds, s.binds)
	s.binds = binds
	for key, hc := range s.services {
		if p, ok := ports[key]; !ok || p != hc.port || rebind {
			hc.close()
			delete(s.services, key)
		}
	}
	var errs []error
	keys := make([]ServiceKey, 0, len(ports))
	for k := range ports {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, key := range keys {
		port := ports[key]
		if _, ok := s.services[key]; ok {
			continue
		}
		if port <= 0 || port > 65535 {
			errs = append(errs, fmt.Errorf("service %s: healthCheckNodePort %d is out of range", key, port))
			continue
		}
		ls, err := s.listenAll(port)
		if err != nil {
			errs = append(errs, fmt.Errorf("service %s: healthCheckNodePort %d: %w", key, port, err))
			continue
		}
		hc := &hcService{port: port, listeners: ls}
		hc.server = &http.Server{Handler: s.handler(key), ReadHeaderTimeout: 5 * time.Second}
		s.services[key] = hc
		for _, l := range ls {
			go func() { _ = hc.server.Serve(l) }()
		}
	}
	return errors.Join(errs...)
}

func (hc *hcService) close() {
	_ = hc.server.Close()
	for _, l := range hc.listeners {
		_ = l.Close()
	}
}

// listenAll opens port on every bind, or none (closing those it opened)
// when one fails.
func (s *ServiceServer) listenAll(port int) ([]net.Listener, error) {
	var ls []net.Listener
	for _, b := range s.binds {
		l, err := s.listen(b.Network, net.JoinHostPort(b.Host, strconv.Itoa(port)))
		if err != nil {
			for _, o := range ls {
				_ = o.Close()
			}
			return nil, err
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// SyncEndpoints sets the number of ready local endpoints per Service;
// Services missing from counts have none.
func (s *ServiceServer) SyncEndpoints(counts map[ServiceKey]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, hc := range s.services {
		hc.local = counts[key]
	}
}

// Ports returns the ports being served, for tests and status.
func (s *ServiceServer) Ports() map[ServiceKey]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[ServiceKey]int{}
	for k, hc := range s.services {
		out[k] = hc.port
	}
	return out
}

// Close stops every server.
func (s *ServiceServer) Close() {
	_ = s.SyncServices(nil, nil)
}

// serviceReply is the body, in kube-proxy's shape.
type serviceReply struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

func (s *ServiceServer) handler(key ServiceKey) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		local := 0
		if hc, ok := s.services[key]; ok {
			local = hc.local
		}
		s.mu.Unlock()
		var r serviceReply
		r.Service.Namespace, r.Service.Name = key.Namespace, key.Name
		r.LocalEndpoints = local
		r.ServiceProxyHealthy = s.healthy()
		code := http.StatusServiceUnavailable
		if local > 0 && r.ServiceProxyHealthy {
			code = http.StatusOK
		}
		writeJSON(w, code, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
