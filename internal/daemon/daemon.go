// Package daemon is what herald's long-running components share to start:
// the API clients (kubeconfig or in-cluster, QPS, burst, user agent), the
// event recorder, and the HTTP servers for metrics and probes.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/herald-lb/herald/internal/version"
)

// RESTConfig loads kubeconfig, or the in-cluster configuration when it is
// empty; errors name the --kubeconfig flag.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
	}
	return rc, nil
}

// APIFlags are the flags every component connects to the API server
// with: --kubeconfig, --kube-api-qps and --kube-api-burst, defined here
// once. A component's Options embed them.
type APIFlags struct {
	// Kubeconfig is a kubeconfig file; empty means in-cluster.
	Kubeconfig string
	// QPS and Burst limit the component's requests to the API server.
	QPS   float64
	Burst int
}

// Register defines the flags on fs, with f's values as defaults.
func (f *APIFlags) Register(fs *pflag.FlagSet) {
	fs.StringVar(&f.Kubeconfig, "kubeconfig", f.Kubeconfig, "kubeconfig file (default: in-cluster configuration)")
	fs.Float64Var(&f.QPS, "kube-api-qps", f.QPS, "requests per second to the API server")
	fs.IntVar(&f.Burst, "kube-api-burst", f.Burst, "burst of requests to the API server")
}

// Validate names the flag of each bad value.
func (f APIFlags) Validate() []error {
	var errs []error
	if f.QPS <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps: must be positive, got %v", f.QPS))
	}
	if f.Burst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-burst: must be at least 1, got %d", f.Burst))
	}
	return errs
}

// Connect builds component's clients with these flags.
func (f APIFlags) Connect(component string) (*Clients, error) {
	return Connect(f.Kubeconfig, component, f.QPS, f.Burst)
}

// Clients are a component's connections to the API server.
type Clients struct {
	Config  *rest.Config
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
}

// Connect builds the clients of component ("controller", "speaker",
// "proxy"): its user agent is herald-<component>/<version>, with the
// given request rate and burst.
func Connect(kubeconfig, component string, qps float64, burst int) (*Clients, error) {
	rc, err := RESTConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = float32(qps), burst
	rc.UserAgent = "herald-" + component + "/" + version.Version
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return &Clients{Config: rc, Kube: kube, Dynamic: dyn}, nil
}

// Recorder records events of component (host: the node, or "") through
// kube until ctx ends or stop is called.
func Recorder(ctx context.Context, kube kubernetes.Interface, scheme *runtime.Scheme, component, host string) (rec record.EventRecorder, stop func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return b.NewRecorder(scheme, corev1.EventSource{Component: "herald-" + component, Host: host}), b.Shutdown
}

// Serve listens on each address and serves its handler until stop. The
// error of a port already taken is returned as is (callers say who may
// hold it); one that stops serving later is logged.
func Serve(log *slog.Logger, handlers map[string]http.Handler) (stop func(), err error) {
	var servers []*http.Server
	stop = func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, s := range servers {
			_ = s.Shutdown(sctx)
		}
	}
	for addr, h := range handlers {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			stop()
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server stopped", "addr", addr, "err", err)
			}
		}()
	}
	return stop, nil
}

// Retry calls try until it reports done or ctx ends, pausing first after
// the first failure, then twice as long after each further one, at most
// max (apimachinery's wait.Backoff). try is told the pause that follows a
// failure, to log it; Retry returns ctx's error when ctx ends first.
func Retry(ctx context.Context, first, max time.Duration, try func(next time.Duration) (done bool)) error {
	b := wait.Backoff{Duration: first, Factor: 2, Steps: math.MaxInt32, Cap: max}
	for {
		next := b.Step()
		if try(next) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(next):
		}
	}
}

// OneObject is an informer factory for the object called name in ns only:
// its list and watch carry a metadata.name field selector, which is what
// lets RBAC resourceNames grant them (herald's speakers may read two
// Secrets and one Lease by name, nothing else of those kinds).
func OneObject(kube kubernetes.Interface, ns, name string) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name }))
}

// DaemonSetOwner is the pod's controlling DaemonSet, or nil.
func DaemonSetOwner(p *corev1.Pod) *metav1.OwnerReference {
	for _, r := range p.OwnerReferences {
		if r.Kind == "DaemonSet" && r.Controller != nil && *r.Controller {
			return &r
		}
	}
	return nil
}
