package kubelet

import (
	"fmt"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"
)

// ociSource is what image mode derives a container's OCI configuration
// from: the pod, the container, the image and what the kubelet prepared.
type ociSource struct {
	pod   *v1.Pod
	c     *v1.Container
	image imageConfig
	// env is the container's environment as the kubelet computes it
	// (containerEnv); the image's variables go underneath.
	env []string
	// netnsPath is the network namespace to join (the pod's or, for
	// hostNetwork pods, the node's).
	netnsPath string
	binds     []bind
	// available are the capabilities the kubelet itself may hand out
	// (its bounding set): what "all" means for a privileged container.
	available []string
	// readFile reads a file of the image (for /etc/passwd and /etc/group).
	readFile    func(name string) ([]byte, error)
	cgroupsPath string
	rlimits     []specs.POSIXRlimit
}

// ociContainer is every choice made for one container, before any file
// is written: the runtime's view of the pod spec.
type ociContainer struct {
	Args            []string
	Env             []string
	Cwd             string
	User            specs.User
	Hostname        string
	NetnsPath       string
	HostPID         bool
	Privileged      bool
	Caps            []string // without CAP_
	ReadOnlyRoot    bool
	NoNewPrivileges bool
	Binds           []bind
	CgroupsPath     string
	// CPUShares is the container cgroup's cpu.shares (CPUShares); 0
	// leaves runc's default.
	CPUShares uint64
	Rlimits   []specs.POSIXRlimit
}

// newOCIContainer applies the container's securityContext (and the
// pod's) the way containerd and CRI-O do; a spec a real node would
// refuse is a CreateContainerConfigError here too.
func newOCIContainer(s ociSource) (ociContainer, error) {
	c, pod := s.c, s.pod
	args, err := ociArgs(s.image.Entrypoint, s.image.Cmd, c.Command, c.Args)
	if err != nil {
		return ociContainer{}, err
	}
	o := ociContainer{
		Args:        args,
		Env:         mergeEnv(s.image.Env, s.env),
		Cwd:         firstNonEmpty(c.WorkingDir, s.image.WorkingDir, "/"),
		Hostname:    podHostname(pod),
		NetnsPath:   s.netnsPath,
		HostPID:     pod.Spec.HostPID,
		Binds:       s.binds,
		CgroupsPath: s.cgroupsPath,
		Rlimits:     s.rlimits,
	}
	if pod.Spec.HostNetwork {
		o.Hostname = pod.Spec.NodeName
	}
	caps, all := capabilities(c.SecurityContext)
	if all {
		caps = s.available
	} else if missing := slices.DeleteFunc(slices.Clone(caps), func(c string) bool { return slices.Contains(s.available, c) }); len(missing) > 0 {
		return ociContainer{}, &containerError{Reason: ReasonCreateContainerError, Message: fmt.Sprintf(
			"capabilities %v are not in the lab kubelet's own bounding set, so no runtime here can grant them", missing)}
	}
	o.Caps = caps
	sc := c.SecurityContext
	if sc != nil {
		o.Privileged = isTrue(sc.Privileged)
		o.ReadOnlyRoot = isTrue(sc.ReadOnlyRootFilesystem)
		// Kubernetes allows escalation unless told otherwise.
		o.NoNewPrivileges = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation && !o.Privileged
	}
	if o.User, err = ociUser(pod, c, s.image.User, s.readFile); err != nil {
		return ociContainer{}, err
	}
	return o, nil
}

// ociArgs applies Kubernetes' rules to the image's ENTRYPOINT and CMD:
// command replaces the entrypoint (and drops CMD), args replace CMD.
func ociArgs(entrypoint, cmd, command, args []string) ([]string, error) {
	var out []string
	switch {
	case len(command) > 0:
		out = append(slices.Clone(command), args...)
	case len(args) > 0:
		out = append(slices.Clone(entrypoint), args...)
	default:
		out = append(slices.Clone(entrypoint), cmd...)
	}
	if len(out) == 0 {
		return nil, &containerError{Reason: ReasonCreateContainerError, Message: "no command specified: the image has neither ENTRYPOINT nor CMD and the container no command"}
	}
	return out, nil
}

// mergeEnv puts the container's variables over the image's, keeping the
// image's order first, as the runtimes do.
func mergeEnv(image, container []string) []string {
	out := slices.Clone(image)
	index := map[string]int{}
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		index[k] = i
	}
	for _, kv := range container {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			out[i] = kv
			continue
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	return out
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// spec renders the OCI runtime configuration (config.json) for runc,
// with the rootfs in the bundle's "rootfs".
func (o ociContainer) spec() *specs.Spec {
	caps := make([]string, len(o.Caps))
	for i, c := range o.Caps {
		caps[i] = "CAP_" + c
	}
	ns := []specs.LinuxNamespace{
		{Type: specs.IPCNamespace},
		{Type: specs.UTSNamespace},
		{Type: specs.MountNamespace},
		{Type: specs.NetworkNamespace, Path: o.NetnsPath},
	}
	if !o.HostPID {
		ns = append([]specs.LinuxNamespace{{Type: specs.PIDNamespace}}, ns...)
	}
	s := &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: "rootfs", Readonly: o.ReadOnlyRoot},
		Hostname: o.Hostname,
		Process: &specs.Process{
			User: o.User,
			Args: o.Args,
			Env:  o.Env,
			Cwd:  o.Cwd,
			// As containerd: no inheritable or ambient set, so a non-root
			// user ends up with no effective capabilities.
			Capabilities:    &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps},
			Rlimits:         o.Rlimits,
			NoNewPrivileges: o.NoNewPrivileges,
		},
		Mounts: append(systemMounts(o.Privileged), bindMounts(o.Binds)...),
		Linux: &specs.Linux{
			Namespaces:  ns,
			CgroupsPath: o.CgroupsPath,
			// runc adds the standard devices (null, zero, tty, ...) to
			// whatever is allowed here.
			Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: o.Privileged, Access: "rwm"}}},
		},
	}
	if o.CPUShares > 0 {
		shares := o.CPUShares
		s.Linux.Resources.CPU = &specs.LinuxCPU{Shares: &shares}
	}
	if !o.Privileged {
		s.Linux.MaskedPaths = maskedPaths
		s.Linux.ReadonlyPaths = readonlyPaths
	}
	return s
}

// maskedPaths and readonlyPaths are containerd's defaults for a
// container that is not privileged.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap",
	}
	readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// systemMounts are what every runtime gives a container: /proc, a small
// /dev with its pts, shm and mqueue, and /sys and the cgroups, read-only
// unless the container is privileged.
func systemMounts(privileged bool) []specs.Mount {
	sysOpt := "ro"
	if privileged {
		sysOpt = "rw"
	}
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", sysOpt}},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", sysOpt}},
	}
}

// bindMounts are the volumes and the pod's /etc files.
func bindMounts(binds []bind) []specs.Mount {
	out := make([]specs.Mount, 0, len(binds))
	for _, b := range binds {
		opts := []string{"rbind", "ro"}
		if b.RW {
			opts[1] = "rw"
		}
		out = append(out, specs.Mount{Destination: b.Target, Type: "bind", Source: b.Source, Options: opts})
	}
	return out
}
