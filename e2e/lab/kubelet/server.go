package kubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	remotecommandconsts "k8s.io/apimachinery/pkg/util/remotecommand"

	"github.com/herald-lb/herald/e2e/lab/netns"
)

// The kubelet API (serveAPI): what a real kubelet serves on :10250 that
// kubectl and the upstream e2e framework use, through the API server's
// nodes/proxy and pods/exec, pods/log, pods/portforward:
//
//	GET  /healthz
//	GET  /containerLogs/{namespace}/{pod}/{container}   (PodLogOptions query)
//	GET|POST /exec/{namespace}/{pod}[/{uid}]/{container}?command=...&stdin=&stdout=&stderr=&tty=
//	GET|POST /portForward/{namespace}/{pod}[/{uid}]
//	POST /run/{namespace}/{pod}[/{uid}]/{container}?cmd=...
//
// exec and portForward speak SPDY and WebSocket through the kubelet
// streaming packages of k8s.io/kubelet (pkg/cri/streaming), which the
// real kubelet's CRI runtimes use; the lab kubelet is its own runtime.
// Attach, stats, metrics, /pods and the rest are not served (404).

// Streaming timeouts: the kubelet's defaults.
const (
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = remotecommandconsts.DefaultStreamCreationTimeout
)

// apiHandler routes the kubelet API's paths (without authentication).
func (k *Kubelet) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", k.serveLogs)
	for _, p := range []string{"/exec/{namespace}/{pod}/{container}", "/exec/{namespace}/{pod}/{uid}/{container}"} {
		mux.HandleFunc("GET "+p, k.serveExec)
		mux.HandleFunc("POST "+p, k.serveExec)
	}
	for _, p := range []string{"/portForward/{namespace}/{pod}", "/portForward/{namespace}/{pod}/{uid}"} {
		mux.HandleFunc("GET "+p, k.servePortForward)
		mux.HandleFunc("POST "+p, k.servePortForward)
	}
	mux.HandleFunc("POST /run/{namespace}/{pod}/{container}", k.serveRun)
	mux.HandleFunc("POST /run/{namespace}/{pod}/{uid}/{container}", k.serveRun)
	return mux
}

// serveAPI serves the kubelet API over TLS on the node's InternalIPs
// (port cfg.Port, in the node's network namespace) until ctx ends.
func (k *Kubelet) serveAPI(ctx context.Context) error {
	cert, err := tls.LoadX509KeyPair(k.cfg.TLSCertFile, k.cfg.TLSKeyFile)
	if err != nil {
		return fmt.Errorf("kubelet API: serving certificate: %w", err)
	}
	caPEM, err := os.ReadFile(k.cfg.ClientCAFile)
	if err != nil {
		return fmt.Errorf("kubelet API: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("kubelet API: no certificate in %s", k.cfg.ClientCAFile)
	}
	auth, err := newAPIAuth(k.cfg.NodeName, k.cfg.ClientCAFile, k.client)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler: auth.wrap(k.apiHandler()),
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			// A certificate is optional (a bearer token will do), but
			// one that is given must chain to the client CA.
			ClientAuth: tls.VerifyClientCertIfGiven,
			ClientCAs:  pool,
			MinVersion: tls.VersionTLS12,
		},
		ReadHeaderTimeout: 30 * time.Second,
	}
	var listeners []net.Listener
	for _, ip := range k.nodeIPs() {
		addr := net.JoinHostPort(ip, strconv.Itoa(k.cfg.Port))
		var ln net.Listener
		err := netns.Do(k.cfg.NodeNetns, func() (err error) {
			ln, err = net.Listen("tcp", addr)
			return err
		})
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return fmt.Errorf("kubelet API: listening on %s: %w", addr, err)
		}
		listeners = append(listeners, ln)
	}
	for _, ln := range listeners {
		go func() {
			if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
				k.logf("kubelet API on %s: %v", ln.Addr(), err)
			}
		}()
	}
	go func() {
		<-ctx.Done()
		// Listeners and open requests; hijacked streams (exec,
		// port-forward) end when the kubelet process does.
		_ = srv.Close()
	}()
	k.logf("kubelet API serving on port %d of %v", k.cfg.Port, k.nodeIPs())
	return nil
}

// apiError is an error with the HTTP status the API answers it with.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func notFound(format string, args ...any) error {
	return &apiError{http.StatusNotFound, fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	var ae *apiError
	if errors.As(err, &ae) {
		status = ae.status
	}
	http.Error(w, err.Error(), status)
}

// findPod is the running pod namespace/name (with that UID, when uid is
// not empty).
func (k *Kubelet) findPod(namespace, name, uid string) (*podWorker, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.workers {
		if w.key == namespace+"/"+name && (uid == "" || string(w.uid) == uid) {
			return w, nil
		}
	}
	return nil, notFound("pod %q does not exist on node %s", namespace+"/"+name, k.cfg.NodeName)
}

// findContainer is a container of a pod the kubelet runs: an app
// container or an init container (sidecar or not), by name, as the
// real kubelet finds them (kubectl logs -c <init container>).
func (k *Kubelet) findContainer(r *http.Request) (*podWorker, *container, error) {
	w, err := k.findPod(r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("uid"))
	if err != nil {
		return nil, nil, err
	}
	name := r.PathValue("container")
	_, containers := w.apiView()
	for _, c := range containers {
		if c.spec.Name == name {
			return w, c, nil
		}
	}
	return nil, nil, notFound("container %q not found in pod %q", name, w.key)
}
