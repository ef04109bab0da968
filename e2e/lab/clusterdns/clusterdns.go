// Package clusterdns gives the lab the cluster DNS a real cluster has:
// CoreDNS, of the version kubeadm installs with the pinned Kubernetes
// release, built from its Go module, run as the Deployment and kube-dns
// Service kubeadm makes, with the kubelets pointing pods at it. The
// upstream Service tests reach Services by name (`nc svc-name 80`), so
// without it they test the lab's missing DNS instead of the proxy.
package clusterdns

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Domain is the cluster domain.
const Domain = "cluster.local"

// Module is CoreDNS's Go module.
const Module = "github.com/coredns/coredns"

// ImageRepository is where kubeadm takes CoreDNS from; the lab's image of
// the same version is stored under this name.
const ImageRepository = "registry.k8s.io/coredns/coredns"

// Image is the reference of version's image.
func Image(version string) string { return ImageRepository + ":" + version }

// ServiceIP is the kube-dns Service's ClusterIP in serviceCIDR: the tenth
// address, as kubeadm picks it.
func ServiceIP(serviceCIDR netip.Prefix) netip.Addr {
	a := serviceCIDR.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	return a
}

var versionRE = regexp.MustCompile(`(?m)^\s*CoreDNSVersion\s*=\s*"(v[0-9][^"]*)"`)

// KubeadmVersion is the CoreDNS version kubeadm of the pinned release
// installs (cmd/kubeadm/app/constants in the k8s.io/kubernetes module).
func KubeadmVersion(ctx context.Context, moduleDir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	cmd.Dir = moduleDir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("finding the k8s.io/kubernetes module: %w", err)
	}
	file := filepath.Join(strings.TrimSpace(string(out)), "cmd", "kubeadm", "app", "constants", "constants.go")
	src, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	return parseKubeadmVersion(src, file)
}

func parseKubeadmVersion(src []byte, file string) (string, error) {
	m := versionRE.FindSubmatch(src)
	if m == nil {
		return "", fmt.Errorf("%s sets no CoreDNSVersion", file)
	}
	return string(m[1]), nil
}

// EnsureBinary builds CoreDNS version into <cacheDir>/coredns/<version>/
// with `go install` in module mode (CoreDNS's own go.mod, apart from the
// lab module's pins), once per version: about 3 minutes cold.
func EnsureBinary(ctx context.Context, cacheDir, version string, log func(string, ...any)) (string, error) {
	dir := filepath.Join(cacheDir, "coredns", version)
	bin := filepath.Join(dir, "coredns")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := filepath.Join(dir, "tmp")
	_ = os.RemoveAll(tmp)
	log("building CoreDNS %s from %s (go install; a few minutes the first time)", version, Module)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "install", "-trimpath", "-ldflags=-s -w", Module+"@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %w: %s", Module, version, err, tail(string(out), 3000))
	}
	if err := os.Rename(filepath.Join(tmp, "coredns"), bin); err != nil {
		return "", err
	}
	_ = os.RemoveAll(tmp)
	log("built CoreDNS %s in %s", version, time.Since(start).Round(time.Second))
	return bin, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// Containerfile is the image: the static binary alone, as upstream's
// image is (a distroless base with /coredns).
const Containerfile = `FROM scratch
COPY coredns /coredns
EXPOSE 53 53/udp
ENTRYPOINT ["/coredns"]
`

// Config is what the manifests need.
type Config struct {
	Image string
	// ServiceIP is kube-dns's ClusterIP.
	ServiceIP netip.Addr
	// APIServerHost and APIServerPort reach the API server directly: the
	// lab's kubernetes Service needs a proxy, and CoreDNS starts before
	// the tests rely on one.
	APIServerHost, APIServerPort string
	Replicas                     int
}

// Corefile serves the cluster domain and reverse zones from the API, and
// nothing else: the lab has no upstream resolver to forward to, so other
// names fail at once instead of timing out.
const Corefile = `.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes ` + Domain + ` in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    prometheus :9153
    cache 30
    loop
    reload
    loadbalance
}
`

// Manifests are the ServiceAccount, RBAC, ConfigMap, Deployment and
// Service of the cluster DNS in kube-system, named as kubeadm names them.
func Manifests(c Config) string {
	if c.Replicas <= 0 {
		c.Replicas = 2
	}
	indented := "    " + strings.ReplaceAll(strings.TrimRight(Corefile, "\n"), "\n", "\n    ")
	return fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata:
  name: coredns
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:coredns
subjects:
- kind: ServiceAccount
  name: coredns
  namespace: kube-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
%[1]s
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  replicas: %[2]d
  selector:
    matchLabels: {k8s-app: kube-dns}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      containers:
      - name: coredns
        image: %[3]s
        args: [-conf, /etc/coredns/Corefile]
        env:
        - {name: KUBERNETES_SERVICE_HOST, value: %[4]q}
        - {name: KUBERNETES_SERVICE_PORT, value: %[5]q}
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        - {name: metrics, containerPort: 9153, protocol: TCP}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {add: [NET_BIND_SERVICE], drop: [ALL]}
        livenessProbe:
          httpGet: {path: /health, port: 8080}
          initialDelaySeconds: 5
          periodSeconds: 10
          failureThreshold: 5
        readinessProbe:
          httpGet: {path: /ready, port: 8181}
          periodSeconds: 2
        volumeMounts:
        - {name: config, mountPath: /etc/coredns, readOnly: true}
      volumes:
      - name: config
        configMap:
          name: coredns
          items: [{key: Corefile, path: Corefile}]
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: %[6]s
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
  - {name: metrics, port: 9153, protocol: TCP, targetPort: 9153}
`, indented, c.Replicas, c.Image, c.APIServerHost, c.APIServerPort, c.ServiceIP)
}

// podmanFlags are what podman needs on these machines: runc, and rlimits
// no higher than root's (crun wants CAP_SYS_RESOURCE).
var podmanFlags = []string{"--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"}

// binaryLabel holds the built binary's size and time, so a rebuilt binary
// makes a new image.
const binaryLabel = "io.herald.coredns.binary"

// EnsureImage stores the image of bin under image in root's podman
// storage unless it holds it already for this binary.
func EnsureImage(ctx context.Context, bin, image string, log func(string, ...any)) error {
	fi, err := os.Stat(bin)
	if err != nil {
		return err
	}
	stamp := fmt.Sprintf("%d-%d", fi.Size(), fi.ModTime().Unix())
	out, err := exec.CommandContext(ctx, "podman", "image", "inspect", "--format", "{{index .Labels \""+binaryLabel+"\"}}", image).Output()
	if err == nil && strings.TrimSpace(string(out)) == stamp {
		return nil
	}
	dir, err := os.MkdirTemp("", "herald-coredns-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Link(bin, filepath.Join(dir, "coredns")); err != nil {
		data, rerr := os.ReadFile(bin)
		if rerr != nil {
			return rerr
		}
		if err := os.WriteFile(filepath.Join(dir, "coredns"), data, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(Containerfile), 0o644); err != nil {
		return err
	}
	args := append([]string{"build", "--pull=never"}, podmanFlags...)
	args = append(args, "--label", binaryLabel+"="+stamp, "-t", image, "-f", filepath.Join(dir, "Containerfile"), dir)
	start := time.Now()
	if b, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, tail(string(b), 2000))
	}
	log("stored %s in %s", image, time.Since(start).Round(100*time.Millisecond))
	return nil
}
