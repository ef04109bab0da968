package kubelet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/e2e/lab/netns"
)

// Image mode (Config.ImageMode): every container whose image is not the
// echo server's runs that image from podman's local storage under runc,
// with the pod's securityContext and volumes, so a capability, tool or
// file the image lacks fails as it would on a real node. Binary mode
// (the default) runs the host's herald binary instead, for fast loops.
//
// Not done, and documented as such: seccomp profiles (RuntimeDefault
// runs unconfined), AppArmor, resource limits, the host devices of
// privileged containers, subPath mounts, and image pulls.

// setupImageMode checks for runc and podman and readies the runtime.
func (k *Kubelet) setupImageMode() error {
	for _, tool := range []string{"runc", "podman"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("kubelet: image mode needs %s (Debian package %s): %w", tool, tool, err)
		}
	}
	available, err := boundingCaps()
	if err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	k.available = available
	k.runtime = newOCIRuntime(k.cfg.StateDir, k.cfg.NodeNetns)
	k.images = imageStore{podman: "podman", dir: k.cfg.ImageDir}
	return nil
}

// usesImage tells whether the kubelet runs image through runc. The echo
// server and kube-proxy stay host programs: the lab has no kube-proxy
// image (nothing is pulled), and building one would only wrap the same
// multi-call binary that binary mode runs.
func (k *Kubelet) usesImage(image string) bool {
	kind, _ := imageKind(image)
	return k.cfg.ImageMode && kind != EchoServerImage && kind != KubeProxyImage
}

// launch is how one run of a container starts: a program (binary mode)
// or a container under runc (image mode).
type launch struct {
	program   string
	args, env []string

	oci     *ociContainer
	lower   string // the image's filesystem
	imageID string
	// shares is the container's cgroup v1 cpu.shares (CPUShares), in
	// both modes.
	shares uint64
}

func (l *launch) describe() string {
	if l.oci != nil {
		return fmt.Sprintf("image %s: %v", l.imageID, l.oci.Args)
	}
	return fmt.Sprintf("%s %v", l.program, l.args)
}

// start starts one run of container name.
func (w *podWorker) start(name string, l *launch, logPath string) (*process, error) {
	n := atomic.AddUint64(&w.k.runs, 1)
	id := fmt.Sprintf("%.8s-%s-%d", w.uid, name, n)
	if l.oci == nil {
		p, err := startProcess(name, w.sandbox.netns, l.program, l.args, l.env, w.logDir, logPath)
		if err != nil {
			return nil, err
		}
		// Its cgroup, like an image-mode container's under runc: below
		// the node's, with the container's CPU weight.
		dir, err := placeInCgroup(cgroupParent(w.k.cfg.NodeNetns)+"/"+id, p.rec.PID, l.shares)
		if err != nil {
			appendLog(logPath, "=== its cgroup: %v", err)
		}
		if dir != "" {
			go func() {
				<-p.exited
				_ = os.Remove(dir) // fails while a child it left lives; Down sweeps it
			}()
		}
		return p, nil
	}
	o := *l.oci
	o.CPUShares = l.shares
	return w.k.runtime.start(name, id, o, l.lower, logPath)
}

// prepareImage computes an image-mode run of container c.
func (w *podWorker) prepareImage(ctx context.Context, pod *v1.Pod, c *v1.Container, in envInput) (*launch, error) {
	k := w.k
	img, err := k.images.inspect(ctx, c.Image)
	if err != nil {
		return nil, err
	}
	for _, kv := range img.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			in.defaultEnvPath = v
		}
	}
	env, err := containerEnv(ctx, in, c)
	if err != nil {
		return nil, err
	}
	lower, err := k.images.rootfs(ctx, img)
	if err != nil {
		return nil, &containerError{Reason: ReasonCreateContainerError, Message: err.Error()}
	}
	binds, err := w.imageBinds(ctx, pod, c)
	if err != nil {
		return nil, err
	}
	spec := *c
	spec.Command, spec.Args = expandAll(c.Command, env.vals), expandAll(c.Args, env.vals)
	o, err := newOCIContainer(ociSource{
		pod:       pod,
		c:         &spec,
		image:     img,
		env:       env.list(),
		netnsPath: filepath.Join(netns.Dir, w.sandbox.netns),
		binds:     binds,
		available: k.available,
		readFile:  func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(lower, name)) },
		rlimits:   currentRlimits(),
	})
	if err != nil {
		return nil, err
	}
	return &launch{oci: &o, lower: lower, imageID: "sha256:" + img.ID, shares: CPUShares(c)}, nil
}

func expandAll(list []string, env map[string]string) []string {
	var out []string
	for _, s := range list {
		out = append(out, Expand(s, env))
	}
	return out
}

// imageBinds are the container's volumes plus what a runtime gives every
// container: the pod's /etc/hosts, /etc/hostname and /etc/resolv.conf,
// and its termination-message file.
func (w *podWorker) imageBinds(ctx context.Context, pod *v1.Pod, c *v1.Container) ([]bind, error) {
	binds, warnings, err := w.volumes(pod).binds(ctx, c, true)
	if err != nil {
		return nil, err
	}
	for _, warn := range warnings {
		w.event(v1.EventTypeWarning, "FailedMount", "%s", warn)
	}
	host, fqdn := podHostname(pod), podFQDN(pod, w.k.cfg.DNS.Domain)
	if pod.Spec.HostNetwork {
		host, fqdn = pod.Spec.NodeName, ""
	}
	node, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		node = nil // no resolver on the machine: an empty file will do
	}
	resolv := resolvConf(pod, w.k.cfg.DNS, node)
	files := map[string][]byte{
		"etc/hosts":       []byte(podHosts(host, fqdn, w.podIP(), w.sandbox.ip6)),
		"etc/hostname":    []byte(host + "\n"),
		"etc/resolv.conf": resolv,
	}
	dir := filepath.Join(w.logDir, "runtime")
	if err := writeFiles(dir, files); err != nil {
		return nil, err
	}
	binds = append(binds,
		bind{Source: filepath.Join(dir, "etc/hosts"), Target: "/etc/hosts"},
		bind{Source: filepath.Join(dir, "etc/hostname"), Target: "/etc/hostname"},
		bind{Source: filepath.Join(dir, "etc/resolv.conf"), Target: "/etc/resolv.conf"})
	if p := c.TerminationMessagePath; p != "" {
		src := filepath.Join(dir, c.Name+".termination-log")
		if err := os.WriteFile(src, nil, 0o666); err != nil {
			return nil, err
		}
		binds = append(binds, bind{Source: src, Target: p, RW: true})
	}
	return binds, nil
}

// podHosts is the /etc/hosts the kubelet writes for a pod: its
// addresses under its hostname, after its fully qualified name when it
// has one (hostname and subdomain set).
func podHosts(host, fqdn, ip, ip6 string) string {
	var b strings.Builder
	b.WriteString("# Kubernetes-managed hosts file (lab kubelet).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	names := host
	if fqdn != "" {
		names = fqdn + "\t" + host
	}
	for _, a := range []string{ip, ip6} {
		if a != "" {
			fmt.Fprintf(&b, "%s\t%s\n", a, names)
		}
	}
	return b.String()
}

// podHostname is the pod's hostname as the kubelet sets it: spec.hostname
// when given, else the pod's name, cut to 63 characters (a DNS label)
// without a trailing '-' or '.'.
func podHostname(pod *v1.Pod) string {
	h := pod.Spec.Hostname
	if h == "" {
		h = pod.Name
	}
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	return h
}

// podFQDN is <hostname>.<subdomain>.<namespace>.svc.<domain> for a pod with
// a subdomain (the name a headless Service of that name gives it), or "".
func podFQDN(pod *v1.Pod, domain string) string {
	if pod.Spec.Subdomain == "" || domain == "" {
		return ""
	}
	return podHostname(pod) + "." + pod.Spec.Subdomain + "." + pod.Namespace + ".svc." + domain
}

// hostPathBind mounts a hostPath volume, creating it first for the
// *OrCreate types and checking the others, as the kubelet does.
func hostPathBind(m v1.VolumeMount, hp *v1.HostPathVolumeSource) (bind, error) {
	t := v1.HostPathUnset
	if hp.Type != nil {
		t = *hp.Type
	}
	fi, statErr := os.Stat(hp.Path)
	switch t {
	case v1.HostPathDirectoryOrCreate:
		if statErr != nil {
			if err := os.MkdirAll(hp.Path, 0o755); err != nil {
				return bind{}, err
			}
		}
	case v1.HostPathFileOrCreate:
		if statErr != nil {
			f, err := os.OpenFile(hp.Path, os.O_CREATE|os.O_RDWR, 0o644)
			if err != nil {
				return bind{}, err
			}
			f.Close()
		}
	case v1.HostPathUnset:
		// No check: a missing path is created as a directory by runc.
	default:
		if statErr != nil {
			return bind{}, fmt.Errorf("hostPath type check failed: %s is not a %s", hp.Path, t)
		}
		if (t == v1.HostPathDirectory && !fi.IsDir()) || (t == v1.HostPathFile && !fi.Mode().IsRegular()) {
			return bind{}, fmt.Errorf("hostPath type check failed: %s is not a %s", hp.Path, t)
		}
	}
	return bind{Source: hp.Path, Target: m.MountPath, RW: !m.ReadOnly}, nil
}

// currentRlimits are the kubelet's own file and process limits, which
// the container keeps: root here lacks CAP_SYS_RESOURCE, so asking for
// more (podman's default of 1048576 files) fails.
func currentRlimits() []specs.POSIXRlimit {
	var out []specs.POSIXRlimit
	for _, r := range []struct {
		name string
		res  int
	}{{"RLIMIT_NOFILE", unix.RLIMIT_NOFILE}, {"RLIMIT_NPROC", unix.RLIMIT_NPROC}} {
		var l unix.Rlimit
		if err := unix.Getrlimit(r.res, &l); err == nil {
			out = append(out, specs.POSIXRlimit{Type: r.name, Hard: l.Max, Soft: l.Cur})
		}
	}
	return out
}
