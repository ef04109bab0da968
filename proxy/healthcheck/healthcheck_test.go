package healthcheck

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// loopback binds the requested port on 127.0.0.1, or a free one when the
// test maps it (port numbers in tests are symbolic).
type loopback struct {
	real map[int]string // symbolic port -> host:port actually bound
}

func (l *loopback) listen(network, addr string) (net.Listener, error) {
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	if port == 9999 {
		return nil, &net.OpError{Op: "listen", Net: network, Err: errAddrInUse}
	}
	ln, err := net.Listen(network, "127.0.0.1:0")
	if err == nil {
		l.real[port] = ln.Addr().String()
	}
	return ln, err
}

var errAddrInUse = &net.AddrError{Err: "address already in use"}

func get(t *testing.T, url string) (int, serviceReply) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r serviceReply
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("%s: body %q: %v", url, body, err)
	}
	if resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("content type %q", resp.Header.Get("Content-Type"))
	}
	return resp.StatusCode, r
}

func TestServiceServer(t *testing.T) {
	lb := &loopback{real: map[int]string{}}
	healthy := true
	s := NewServiceServer(lb.listen, func() bool { return healthy })
	defer s.Close()
	web := ServiceKey{"default", "web"}
	db := ServiceKey{"prod", "db"}
	if err := s.SyncServices(map[ServiceKey]int{web: 30001, db: 30002}, nil); err != nil {
		t.Fatal(err)
	}
	s.SyncEndpoints(map[ServiceKey]int{web: 2})

	code, r := get(t, "http://"+lb.real[30001]+"/healthz")
	if code != 200 || r.LocalEndpoints != 2 || !r.ServiceProxyHealthy || r.Service.Namespace != "default" || r.Service.Name != "web" {
		t.Errorf("web: %d %+v", code, r)
	}
	// Any path answers, as kube-proxy's does.
	if code, r = get(t, "http://"+lb.real[30002]+"/"); code != 503 || r.LocalEndpoints != 0 {
		t.Errorf("db without local endpoints: %d %+v", code, r)
	}
	// A stuck proxy makes even a node with endpoints unhealthy.
	healthy = false
	if code, r = get(t, "http://"+lb.real[30001]+"/healthz"); code != 503 || r.ServiceProxyHealthy {
		t.Errorf("unhealthy proxy: %d %+v", code, r)
	}
	healthy = true

	// A port that cannot be bound is an error naming the Service, and
	// the others keep serving; a moved port closes the old server.
	bad := ServiceKey{"default", "clash"}
	err := s.SyncServices(map[ServiceKey]int{web: 30001, db: 30003, bad: 9999}, nil)
	if err == nil || !strings.Contains(err.Error(), "default/clash") || !strings.Contains(err.Error(), "9999") {
		t.Errorf("port clash error %v", err)
	}
	if code, _ := get(t, "http://"+lb.real[30001]+"/healthz"); code != 200 {
		t.Errorf("web disturbed by another Service's bad port: %d", code)
	}
	if _, err := http.Get("http://" + lb.real[30002] + "/"); err == nil {
		t.Errorf("db's old port still serves")
	}
	if code, _ := get(t, "http://"+lb.real[30003]+"/"); code != 503 {
		t.Errorf("db's new port: %d", code)
	}
	if err := s.SyncServices(map[ServiceKey]int{web: 70000}, nil); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("out-of-range port: %v", err)
	}
	if got := s.Ports(); len(got) != 0 {
		t.Errorf("ports after a sync with only a bad one: %v", got)
	}
}

func TestProxyHealth(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	h := NewProxyHealth(30 * time.Second)
	h.Now = func() time.Time { return now }
	eligible := true
	h.NodeEligible = func() bool { return eligible }
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	status := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if status("/healthz") != 200 || status("/livez") != 200 {
		t.Errorf("a fresh proxy with nothing queued is healthy")
	}
	h.QueuedUpdate()
	now = now.Add(20 * time.Second)
	h.QueuedUpdate() // a later update does not reset the wait
	now = now.Add(20 * time.Second)
	if h.Healthy() || status("/healthz") != 503 || status("/livez") != 503 {
		t.Errorf("an update waiting 40s (timeout 30s) must be unhealthy")
	}
	h.Updated()
	if !h.Healthy() || status("/healthz") != 200 {
		t.Errorf("healthy again after a sync")
	}
	eligible = false
	if status("/healthz") != 503 || status("/livez") != 200 {
		t.Errorf("an ineligible node: /healthz 503, /livez 200")
	}
}

func TestMetricsHandler(t *testing.T) {
	for _, mode := range []string{"iptables", "nftables"} {
		srv := httptest.NewServer(MetricsHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("# metrics\n"))
		}), mode))
		for path, want := range map[string]string{"/proxyMode": mode, "/metrics": "# metrics\n"} {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != want {
				t.Errorf("%s: %q, want %q", path, body, want)
			}
		}
		srv.Close()
	}
}

// TestServiceServerBinds: with --nodeport-addresses the servers listen on
// the allowed addresses only, each Service on every one of them; a change
// of addresses reopens them, and a bind that fails leaves none open.
func TestServiceServerBinds(t *testing.T) {
	var opened []string
	var open []net.Listener
	listen := func(network, addr string) (net.Listener, error) {
		if strings.HasPrefix(addr, "198.51.100.99:") {
			return nil, &net.OpError{Op: "listen", Net: network, Err: errAddrInUse}
		}
		opened = append(opened, network+" "+addr)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			open = append(open, l)
		}
		return l, err
	}
	s := NewServiceServer(listen, nil)
	defer s.Close()
	web := ServiceKey{"default", "web"}
	binds := []Bind{{Network: "tcp4", Host: "198.51.100.11"}, {Network: "tcp6", Host: "::"}}
	if err := s.SyncServices(map[ServiceKey]int{web: 30001}, binds); err != nil {
		t.Fatal(err)
	}
	if want := []string{"tcp4 198.51.100.11:30001", "tcp6 [::]:30001"}; strings.Join(opened, ",") != strings.Join(want, ",") {
		t.Fatalf("opened %q, want %q", opened, want)
	}
	// The same binds again: nothing reopened.
	if err := s.SyncServices(map[ServiceKey]int{web: 30001}, binds); err != nil || len(opened) != 2 {
		t.Fatalf("a sync with the same binds reopened: %q, %v", opened, err)
	}
	// Other addresses: the old listeners are closed, the new ones open.
	if err := s.SyncServices(map[ServiceKey]int{web: 30001}, []Bind{{Network: "tcp4", Host: "198.51.100.12"}}); err != nil {
		t.Fatal(err)
	}
	if len(opened) != 3 || opened[2] != "tcp4 198.51.100.12:30001" {
		t.Fatalf("after the change: %q", opened)
	}
	for _, l := range open[:2] {
		if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
			t.Errorf("an old listener %s still accepts", l.Addr())
		}
	}
	// One bind failing: an error naming the Service, and nothing of it
	// left open.
	err := s.SyncServices(map[ServiceKey]int{web: 30001}, []Bind{{Network: "tcp4", Host: "198.51.100.13"}, {Network: "tcp4", Host: "198.51.100.99"}})
	if err == nil || !strings.Contains(err.Error(), "default/web") {
		t.Fatalf("a failing bind: %v", err)
	}
	if _, err := net.Dial("tcp", open[3].Addr().String()); err == nil {
		t.Error("the listener opened before the failing bind is still open")
	}
	if len(s.Ports()) != 0 {
		t.Errorf("ports after the failure: %v", s.Ports())
	}
}
