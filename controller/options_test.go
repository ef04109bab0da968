package controller

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestParseFlags(t *testing.T) {
	o, err := ParseFlags([]string{"--namespace=lb", "--lb-class=example.com/lb", "--workers=8", "--leader-elect-identity=me"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Namespace != "lb" || o.LeaseNS != "lb" || o.LBClass != "example.com/lb" || o.Workers != 8 || o.Identity != "me" || o.MetricsAddr != ":7472" {
		t.Errorf("options: %+v", o)
	}
	t.Setenv("POD_NAME", "")
	o, err = ParseFlags(nil, io.Discard)
	if err != nil || o.Identity == "" {
		t.Errorf("without POD_NAME the identity must be generated: %q, %v", o.Identity, err)
	}
	if _, err := ParseFlags([]string{"-h"}, io.Discard); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

func TestParseFlagsErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--namespace=Herald_System"}, "--namespace: "},
		{[]string{"--lb-class=not a class"}, "--lb-class: "},
		{[]string{"--metrics-addr=7472"}, "--metrics-addr: "},
		{[]string{"--metrics-addr=:99999"}, "--metrics-addr: "},
		{[]string{"--workers=0"}, "--workers: 0 is out of range"},
		{[]string{"--kube-api-qps=0"}, "--kube-api-qps: "},
		{[]string{"--kube-api-burst=0"}, "--kube-api-burst: "},
		{[]string{"--status-interval=-1s"}, "--status-interval: "},
		{[]string{"--leader-elect-lease-name=Bad_Name"}, "--leader-elect-lease-name: "},
		{[]string{"--leader-elect-retry-period=0s"}, "--leader-elect-retry-period: must be positive"},
		{[]string{"--leader-elect-renew-deadline=2s"}, "--leader-elect-renew-deadline: 2s must be longer than 1.2 x"},
		{[]string{"--leader-elect-lease-duration=10s"}, "--leader-elect-lease-duration: 10s must be longer than --leader-elect-renew-deadline"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--workers=many"}, `invalid argument "many" for "--workers" flag`},
	} {
		_, err := ParseFlags(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	// Without leader election its flags do not matter.
	o := DefaultOptions()
	o.Namespace, o.LeaseNS, o.LeaderElect, o.RetryPeriod = "x", "x", false, 0
	if err := o.Validate(); err != nil {
		t.Errorf("leader election off: %v", err)
	}
	o.LeaderElect, o.LeaseDuration = true, time.Second
	if err := o.Validate(); err == nil {
		t.Error("bad lease timing accepted")
	}
}

func TestHealthAndReadiness(t *testing.T) {
	m := NewMetrics()
	ready := false
	var healthErr error
	srv := httptest.NewServer(handler(m, func() bool { return ready }, func(*http.Request) error { return healthErr }))
	defer srv.Close()
	get := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get("/readyz"); c != http.StatusServiceUnavailable {
		t.Errorf("/readyz before ready: %d", c)
	}
	ready = true
	if c := get("/readyz"); c != http.StatusOK {
		t.Errorf("/readyz when ready: %d", c)
	}
	if c := get("/healthz"); c != http.StatusOK {
		t.Errorf("/healthz: %d", c)
	}
	healthErr = errors.New("lease expired")
	if c := get("/healthz"); c != http.StatusInternalServerError {
		t.Errorf("/healthz with a stuck leader: %d", c)
	}
	m.leader.Set(1)
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "herald_controller_leader 1") || !strings.Contains(string(body), "herald_controller_allocations_total 0") {
		t.Errorf("/metrics lacks the controller's metrics")
	}
}
