package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/herald-lb/herald/config/v1beta1"
	"github.com/herald-lb/herald/internal/kubeclient"
	"github.com/herald-lb/herald/internal/version"
)

// ErrLostLease is returned when another replica took the Lease: the
// process exits and restarts as a standby, with its state rebuilt from
// the Services, instead of trusting memory another leader has changed.
var ErrLostLease = errors.New("lost the leader Lease")

// Run runs `herald controller` until ctx ends: the metrics and health
// server at once, the controller itself while this replica leads.
func Run(ctx context.Context, o Options, log *slog.Logger) error {
	rc, err := kubeclient.RESTConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = float32(o.QPS), o.Burst
	rc.UserAgent = "herald-controller/" + version.Version
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	// Events go through a client of their own, so a burst of events never
	// delays the writes that assign IPs.
	erc := rest.CopyConfig(rc)
	ekube, err := kubernetes.NewForConfig(erc)
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
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: ekube.CoreV1().Events("")})
	rec := broadcaster.NewRecorder(scheme, corev1.EventSource{Component: "herald-controller"})

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
	ln, err := net.Listen("tcp", o.MetricsAddr)
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	srv := &http.Server{Handler: handler(m, ready, watchdog.Check), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("herald controller starting", "version", version.String(), "namespace", o.Namespace, "lbClass", o.LBClass,
		"metrics", ln.Addr().String(), "leaderElect", o.LeaderElect, "identity", o.Identity)

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
