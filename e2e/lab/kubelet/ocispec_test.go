package kubelet

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"
)

// fakeImageFiles is an image's /etc/passwd and /etc/group.
func fakeImageFiles(name string) ([]byte, error) {
	switch name {
	case "/etc/passwd":
		return []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/usr/sbin/nologin\nherald:x:1000:1001::/:/bin/false\n"), nil
	case "/etc/group":
		return []byte("root:x:0:\nnogroup:x:65534:\nnet:x:2000:\n"), nil
	}
	return nil, os.ErrNotExist
}

func heraldImage() imageConfig {
	return imageConfig{ID: "abc", Entrypoint: []string{"/herald"}, Env: []string{"PATH=/usr/sbin:/usr/bin", "LANG=C"}}
}

// speakerPod is config/deploy's speaker, reduced to what the runtime
// sees.
func speakerPod() (*v1.Pod, *v1.Container) {
	c := v1.Container{
		Name:  "speaker",
		Image: HeraldImageName,
		Args:  []string{"speaker", "--metrics-addr=:7473"},
		SecurityContext: &v1.SecurityContext{Capabilities: &v1.Capabilities{
			Drop: []v1.Capability{"ALL"}, Add: []v1.Capability{"NET_ADMIN", "NET_RAW"}}},
	}
	pod := &v1.Pod{Spec: v1.PodSpec{NodeName: "node1", HostNetwork: true, Containers: []v1.Container{c}}}
	pod.Name = "herald-speaker-x"
	return pod, &pod.Spec.Containers[0]
}

func TestNewOCIContainer(t *testing.T) {
	all := capsOfMask((1<<41 - 1) &^ (1 << 24)) // a root without SYS_RESOURCE, like ours
	for name, tc := range map[string]struct {
		edit  func(*v1.Pod, *v1.Container, *imageConfig)
		check func(*testing.T, ociContainer)
		err   string // a containerError's reason
	}{
		"speaker: image entrypoint, args, two capabilities, root, node's hostname": {
			check: func(t *testing.T, o ociContainer) {
				want(t, "args", o.Args, []string{"/herald", "speaker", "--metrics-addr=:7473"})
				want(t, "caps", o.Caps, []string{"NET_ADMIN", "NET_RAW"})
				want(t, "user", o.User, specs.User{})
				want(t, "hostname", o.Hostname, "node1")
				want(t, "privileged, read-only, no new privileges", []bool{o.Privileged, o.ReadOnlyRoot, o.NoNewPrivileges}, []bool{false, false, false})
				want(t, "cwd", o.Cwd, "/")
			},
		},
		"command replaces the entrypoint and drops CMD": {
			edit: func(_ *v1.Pod, c *v1.Container, img *imageConfig) {
				img.Cmd = []string{"--help"}
				c.Command, c.Args = []string{"/bin/sh", "-c"}, []string{"true"}
			},
			check: func(t *testing.T, o ociContainer) { want(t, "args", o.Args, []string{"/bin/sh", "-c", "true"}) },
		},
		"no command and no args: ENTRYPOINT then CMD": {
			edit:  func(_ *v1.Pod, c *v1.Container, img *imageConfig) { c.Args, img.Cmd = nil, []string{"version"} },
			check: func(t *testing.T, o ociContainer) { want(t, "args", o.Args, []string{"/herald", "version"}) },
		},
		"nothing to run": {
			edit: func(_ *v1.Pod, c *v1.Container, img *imageConfig) { c.Args, img.Entrypoint = nil, nil },
			err:  ReasonCreateContainerError,
		},
		"controller: runAsUser from the pod, read-only root, no escalation, drop ALL": {
			edit: func(p *v1.Pod, c *v1.Container, _ *imageConfig) {
				p.Spec.HostNetwork = false
				p.Spec.SecurityContext = &v1.PodSecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(65534)), RunAsGroup: ptr(int64(65534))}
				c.SecurityContext = &v1.SecurityContext{AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true),
					Capabilities: &v1.Capabilities{Drop: []v1.Capability{"ALL"}}}
			},
			check: func(t *testing.T, o ociContainer) {
				want(t, "user", o.User, specs.User{UID: 65534, GID: 65534})
				want(t, "caps", len(o.Caps), 0)
				want(t, "read-only, no new privileges", []bool{o.ReadOnlyRoot, o.NoNewPrivileges}, []bool{true, true})
				want(t, "hostname", o.Hostname, "herald-speaker-x")
			},
		},
		"container's runAsUser wins; group from the image's passwd; supplemental groups": {
			edit: func(p *v1.Pod, c *v1.Container, _ *imageConfig) {
				p.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr(int64(1)), SupplementalGroups: []int64{5, 3}, FSGroup: ptr(int64(3))}
				c.SecurityContext.RunAsUser = ptr(int64(1000))
			},
			check: func(t *testing.T, o ociContainer) {
				want(t, "user", o.User, specs.User{UID: 1000, GID: 1001, AdditionalGids: []uint32{3, 5}})
			},
		},
		"image USER by name with a group name": {
			edit: func(_ *v1.Pod, _ *v1.Container, img *imageConfig) { img.User = "nobody:net" },
			check: func(t *testing.T, o ociContainer) {
				want(t, "user", o.User, specs.User{UID: 65534, GID: 2000})
			},
		},
		"image USER unknown": {
			edit: func(_ *v1.Pod, _ *v1.Container, img *imageConfig) { img.User = "ghost" },
			err:  ReasonCreateContainerError,
		},
		"runAsNonRoot with a root image": {
			edit: func(p *v1.Pod, _ *v1.Container, _ *imageConfig) {
				p.Spec.SecurityContext = &v1.PodSecurityContext{RunAsNonRoot: ptr(true)}
			},
			err: ReasonCreateContainerConfigError,
		},
		"runAsNonRoot with a named image user": {
			edit: func(p *v1.Pod, _ *v1.Container, img *imageConfig) {
				img.User = "nobody"
				p.Spec.SecurityContext = &v1.PodSecurityContext{RunAsNonRoot: ptr(true)}
			},
			err: ReasonCreateContainerConfigError,
		},
		"privileged: every capability the kubelet has": {
			edit: func(_ *v1.Pod, c *v1.Container, _ *imageConfig) {
				c.SecurityContext = &v1.SecurityContext{Privileged: ptr(true), AllowPrivilegeEscalation: ptr(false)}
			},
			check: func(t *testing.T, o ociContainer) {
				want(t, "caps", o.Caps, all)
				want(t, "privileged, no new privileges", []bool{o.Privileged, o.NoNewPrivileges}, []bool{true, false})
			},
		},
		"a capability the lab lacks": {
			edit: func(_ *v1.Pod, c *v1.Container, _ *imageConfig) {
				c.SecurityContext.Capabilities.Add = append(c.SecurityContext.Capabilities.Add, "SYS_RESOURCE")
			},
			err: ReasonCreateContainerError,
		},
		"default capabilities; the container's env over the image's": {
			edit: func(_ *v1.Pod, c *v1.Container, _ *imageConfig) { c.SecurityContext = nil; c.WorkingDir = "/tmp" },
			check: func(t *testing.T, o ociContainer) {
				want(t, "caps", o.Caps, runtimeDefaultCaps)
				want(t, "env", o.Env, []string{"PATH=/usr/sbin:/usr/bin", "LANG=C.UTF-8", "NODE_NAME=node1"})
				want(t, "cwd", o.Cwd, "/tmp")
			},
		},
		"hostPID": {
			edit: func(p *v1.Pod, _ *v1.Container, _ *imageConfig) { p.Spec.HostPID = true },
			check: func(t *testing.T, o ociContainer) {
				if slices.ContainsFunc(o.spec().Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.PIDNamespace }) {
					t.Error("hostPID container has its own PID namespace")
				}
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			pod, c := speakerPod()
			img := heraldImage()
			if tc.edit != nil {
				tc.edit(pod, c, &img)
			}
			o, err := newOCIContainer(ociSource{
				pod: pod, c: c, image: img,
				env:       []string{"LANG=C.UTF-8", "NODE_NAME=node1"},
				netnsPath: "/var/run/netns/hlab-node1",
				available: all,
				readFile:  fakeImageFiles,
			})
			var ce *containerError
			switch {
			case tc.err != "" && (!errors.As(err, &ce) || ce.Reason != tc.err):
				t.Fatalf("error %v, want reason %s", err, tc.err)
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.check != nil:
				tc.check(t, o)
			}
		})
	}
}

func want[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: %#v, want %#v", what, got, want)
	}
}

// TestOCISpec: config.json for the speaker joins the node's network
// namespace, has its own PID, IPC, UTS and mount namespaces, exactly its
// two capabilities in every set a non-root user would keep nothing of,
// containerd's masked paths, and the volumes as bind mounts.
func TestOCISpec(t *testing.T) {
	o := ociContainer{
		Args:        []string{"/herald", "speaker"},
		Env:         []string{"PATH=/usr/bin"},
		Cwd:         "/",
		Hostname:    "node1",
		NetnsPath:   "/var/run/netns/hlab-node1",
		Caps:        []string{"NET_ADMIN", "NET_RAW"},
		CgroupsPath: "/herald-lab/hlab-node1/x",
		Binds: []bind{
			{Source: "/run/xtables.lock", Target: "/run/xtables.lock", RW: true},
			{Source: "/state/pods/p/volumes/token", Target: ServiceAccountDir},
		},
		Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
	}
	s := o.spec()
	want(t, "root", *s.Root, specs.Root{Path: "rootfs"})
	caps := []string{"CAP_NET_ADMIN", "CAP_NET_RAW"}
	want(t, "capabilities", *s.Process.Capabilities, specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps})
	var nsTypes []specs.LinuxNamespaceType
	for _, n := range s.Linux.Namespaces {
		nsTypes = append(nsTypes, n.Type)
		if n.Type == specs.NetworkNamespace && n.Path != o.NetnsPath {
			t.Errorf("network namespace %q, want %q", n.Path, o.NetnsPath)
		}
	}
	want(t, "namespaces", nsTypes, []specs.LinuxNamespaceType{specs.PIDNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace, specs.NetworkNamespace})
	want(t, "cgroup", s.Linux.CgroupsPath, o.CgroupsPath)
	want(t, "rlimits", s.Process.Rlimits, o.Rlimits)
	if !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") || !slices.Contains(s.Linux.MaskedPaths, "/proc/kcore") {
		t.Errorf("runtime default masked/read-only paths missing: %v %v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
	}
	mounts := map[string]specs.Mount{}
	for _, m := range s.Mounts {
		mounts[m.Destination] = m
	}
	for _, d := range []string{"/proc", "/dev", "/dev/pts", "/dev/shm", "/sys", "/sys/fs/cgroup"} {
		if _, ok := mounts[d]; !ok {
			t.Errorf("no %s mount", d)
		}
	}
	want(t, "sysfs options", mounts["/sys"].Options, []string{"nosuid", "noexec", "nodev", "ro"})
	want(t, "xtables lock", mounts["/run/xtables.lock"], specs.Mount{Destination: "/run/xtables.lock", Type: "bind", Source: "/run/xtables.lock", Options: []string{"rbind", "rw"}})
	want(t, "token", mounts[ServiceAccountDir].Options, []string{"rbind", "ro"})

	o.Privileged, o.ReadOnlyRoot, o.HostPID = true, true, true
	s = o.spec()
	want(t, "privileged root", *s.Root, specs.Root{Path: "rootfs", Readonly: true})
	if s.Linux.MaskedPaths != nil || s.Linux.ReadonlyPaths != nil || !s.Linux.Resources.Devices[0].Allow {
		t.Errorf("privileged: masked %v, read-only %v, devices %+v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths, s.Linux.Resources.Devices)
	}
	for _, m := range s.Mounts {
		if m.Destination == "/sys" && !slices.Contains(m.Options, "rw") {
			t.Errorf("privileged: /sys %v", m.Options)
		}
	}
}

func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"PATH=/bin", "A=1", "B=2"}, []string{"B=3", "C=4", "PATH=/usr/bin"})
	want(t, "env", got, []string{"PATH=/usr/bin", "A=1", "B=3", "C=4"})
}

func TestParseImageInspect(t *testing.T) {
	out := []byte(`[{"Id":"dc01","Config":{"Entrypoint":["/herald"],"Cmd":["version"],"Env":["PATH=/bin"],"User":"65534","WorkingDir":"/w"}}]`)
	got, err := parseImageInspect(out)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "image", got, imageConfig{ID: "dc01", Entrypoint: []string{"/herald"}, Cmd: []string{"version"}, Env: []string{"PATH=/bin"}, User: "65534", WorkingDir: "/w"})
	for _, bad := range []string{`[]`, `[{"Id":"../x"}]`, `{}`} {
		if _, err := parseImageInspect([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestCapMasks(t *testing.T) {
	m, err := capMask([]string{"NET_ADMIN", "NET_RAW"})
	if err != nil || m != 0x3000 {
		t.Errorf("capMask: %#x %v", m, err)
	}
	want(t, "names", capsOfMask(0x20000420), []string{"KILL", "NET_BIND_SERVICE", "AUDIT_WRITE"})
	if _, err := capMask([]string{"NOPE"}); err == nil {
		t.Error("unknown capability accepted")
	}
}
