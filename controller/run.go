package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/herald-lb/herald/config/v1beta1"
	"github.com/herald-lb/herald/internal/daemon"
	"github.com/herald-lb/herald/internal/version"
)

// ErrLostLease is returned when another replica took the Lease: the
// process exits and restarts as a standby, with its state rebuilt from
// the Services, instead of trusting memory another leader has changed.
var ErrLostLease = errors.New("lost the leader Lease")

// Run runs `herald controller` until ctx ends: the metrics and health
// server at once, the controller itself while this replica leads.
func Run(ctx context.Context, o Options, log *slog.Logger) error {
	cl, err := o.APIFlags.Connect("controller")
	if err != nil {
		return err
	}
	kube, dyn := cl.Kube, cl.Dynamic
	// Events go through a client of their own, so a burst of events never
	// delays the writes that assign IPs.
	ekube, err := kubernetes.NewForConfig(rest.CopyConfig(cl.Config))
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return err
	}
	rec, stopEvents := daemon.Recorder(ctx, ekube, scheme, "controller", "")
	defer stopEvents()

	m := NewMetrics()
	c := New(o, kube, dyn, rec, m, log)

	var le *leaderelection.LeaderElector
	watchdog := leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	done := make(chan error, 1)
	if o.LeaderElect {
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: o.LeaseNS, Name: o.LeaseName},
			Client:     kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity, EventRecorder: rec},
		}
		le, err = leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   o.LeaseDuration,
			RenewDeadline:   o.RenewDeadline,
			RetryPeriod:     o.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            o.LeaseName,
			WatchDog:        watchdog,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					log.Info("leading: starting to allocate", "lease", o.LeaseNS+"/"+o.LeaseName)
					m.leader.Set(1)
					done <- c.Run(lctx)
				},
				OnStoppedLeading: func() { m.leader.Set(0) },
				OnNewLeader: func(id string) {
					if id != o.Identity {
						log.Info("standing by", "leader", id)
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		watchdog.SetLeaderElection(le)
	}
	ready := func() bool {
		if le == nil || le.IsLeader() {
			return c.Ready()
		}
		// A standby is ready once it has seen who leads.
		return le.GetLeader() != ""
	}
	stopServer, err := daemon.Serve(log, map[string]http.Handler{o.MetricsAddr: handler(m, ready, watchdog.Check)})
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	defer stopServer()
	log.Info("herald controller starting", "version", version.String(), "namespace", o.Namespace, "lbClass", o.LBClass,
		"metrics", o.MetricsAddr, "leaderElect", o.LeaderElect, "identity", o.Identity)

	if le == nil {
		m.leader.Set(1)
		return c.Run(ctx)
	}
	le.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	// Lost the Lease: wait for the workers to stop before exiting.
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-time.After(5 * time.Second):
	}
	return ErrLostLease
}

// handler serves /metrics, /healthz (the process works; for a leader,
// that it still renews its Lease) and /readyz (a leader has adopted the
// existing IPs and assigns; a standby has seen the leader).
func handler(m *Metrics, ready func() bool, healthy func(*http.Request) error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := healthy(r); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready: starting, or adopting the IPs of existing Services\n", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
