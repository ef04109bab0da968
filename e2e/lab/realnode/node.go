package realnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/herald-lb/herald/e2e/lab/netns"
	"github.com/herald-lb/herald/e2e/lab/proc"
)

// Bins are the programs a real node runs.
type Bins struct {
	Containerd, Shim, Ctr string
	// Kubelet is the kubelet (the multi-call binary's kubelet symlink).
	Kubelet string
}

// CNICacheDir is libcni's cache, which containerd does not move.
const CNICacheDir = "/var/lib/cni"

// Node is a started real node.
type Node struct {
	Config     Config
	Containerd *proc.Process
	Kubelet    *proc.Process
}

// State is what Down needs of a node, kept in the lab's state file.
type State struct {
	Name         string        `json:"name"`
	Network      string        `json:"network"`
	ShimDir      string        `json:"shimDir"`
	Dir          string        `json:"dir"`
	CgroupParent string        `json:"cgroupParent"`
	Processes    []proc.Record `json:"processes,omitempty"`
}

// State is the node's record.
func (n *Node) State() State {
	s := State{Name: n.Config.Name, Network: n.Config.NetworkName(), ShimDir: n.Config.ShimSocketDir(), Dir: n.Config.Dir, CgroupParent: n.Config.CgroupParent}
	for _, p := range []*proc.Process{n.Kubelet, n.Containerd} {
		if p != nil {
			s.Processes = append(s.Processes, p.Record)
		}
	}
	return s
}

// Prepare writes the node's files: directories, containerd's and the
// kubelet's configuration, the CNI network, a resolv.conf.
func Prepare(c Config) error {
	for _, d := range []string{filepath.Dir(c.ContainerdConfig()), c.ContainerdRoot(), c.ContainerdState(), c.CNIConfDir(), c.IPAMDir(),
		c.KubeletRoot(), c.PodLogs(), filepath.Join(c.Dir, "pki"), c.ShimSocketDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	cni, err := CNIConfList(c)
	if err != nil {
		return err
	}
	kc, err := KubeletConfiguration(c)
	if err != nil {
		return err
	}
	resolv := "# herald lab: no DNS beyond the cluster's\nnameserver 127.0.0.1\n"
	for path, data := range map[string][]byte{
		c.ContainerdConfig():                             []byte(ContainerdTOML(c)),
		filepath.Join(c.CNIConfDir(), "10-lab.conflist"): cni,
		c.KubeletConfig():                                kc,
		c.ResolvConf():                                   []byte(resolv),
	} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
	// kubelet makes kubepods below its cgroupRoot but wants the root.
	if err := MakeCgroup(c.PodsCgroup()); err != nil {
		return err
	}
	return MakeCgroup(c.RuntimeCgroup())
}

// StartOptions say how to start a node.
type StartOptions struct {
	Bins Bins
	// Images are image archives (podman save) loaded into the runtime
	// before the kubelet starts.
	Images []string
	// KillWithParent ties the runtime and the kubelet to the caller.
	KillWithParent bool
	Log            io.Writer
}

// NodeCommand is the command line that runs path with args as one of
// the node's own processes: inside the node's network namespace, and in a
// UTS namespace of its own whose host name is the node's name. Only
// those: `ip netns exec` would also give it a fresh /sys without the
// host's cgroup mounts, where runc finds no cgroup ("no cgroup mount found
// in mountinfo"). The host name matters to hostNetwork pods, which share
// their runtime's UTS namespace: on a real node they answer with the
// node's name (agnhost's /hostname, upstream's hostNetwork Service tests),
// not the machine's. nsenter, unshare and sh each exec the next, so the
// process keeps one PID.
func NodeCommand(c Config, path string, args []string) (string, []string) {
	return "nsenter", append([]string{
		"--net=" + filepath.Join(netns.Dir, c.Netns), "--",
		"unshare", "--uts", "--",
		"sh", "-c", `hostname "$0" || exit 1; exec "$@"`, c.Name,
		path}, args...)
}

// inNetns starts path as one of the node's processes (NodeCommand).
func inNetns(c Config, name, path, logPath string, args []string, killWithParent bool) (*proc.Process, error) {
	cmd, cmdArgs := NodeCommand(c, path, args)
	p, err := proc.Start(proc.Spec{
		Name:    name,
		Path:    cmd,
		Args:    cmdArgs,
		LogPath: logPath,
		// containerd looks for its shim on PATH; the lab's is next to it.
		Env:            []string{"PATH=" + filepath.Dir(path) + string(os.PathListSeparator) + os.Getenv("PATH")},
		KillWithParent: killWithParent,
	})
	if err != nil {
		return nil, err
	}
	if err := JoinCgroup(c.RuntimeCgroup(), p.PID); err != nil {
		_ = p.Stop(time.Second)
		return nil, err
	}
	return p, nil
}

// StartRuntime starts the node's containerd and loads the images.
func StartRuntime(ctx context.Context, c Config, o StartOptions) (*proc.Process, error) {
	p, err := inNetns(c, "containerd-"+c.Name, o.Bins.Containerd, filepath.Join(c.Dir, "containerd.log"), ContainerdArgs(c), o.KillWithParent)
	if err != nil {
		return nil, fmt.Errorf("containerd of %s: %w", c.Name, err)
	}
	if err := waitSocket(ctx, p, c.Socket(), 30*time.Second); err != nil {
		var b strings.Builder
		proc.WriteTail(&b, p.LogPath, 20)
		_ = p.Stop(time.Second)
		return nil, fmt.Errorf("containerd of %s: %w\n%s", c.Name, err, b.String())
	}
	for _, img := range o.Images {
		cmd := exec.CommandContext(ctx, o.Bins.Ctr, "--address", c.Socket(), "--namespace", "k8s.io", "images", "import", "--no-unpack=false", img)
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = p.Stop(time.Second)
			return nil, fmt.Errorf("loading %s into %s's containerd: %w: %s", filepath.Base(img), c.Name, err, strings.TrimSpace(string(out)))
		}
	}
	return p, nil
}

// StartKubelet starts the node's kubelet.
func StartKubelet(c Config, o StartOptions) (*proc.Process, error) {
	p, err := inNetns(c, "kubelet-"+c.Name, o.Bins.Kubelet, filepath.Join(c.Dir, "kubelet.log"), KubeletArgs(c), o.KillWithParent)
	if err != nil {
		return nil, fmt.Errorf("kubelet of %s: %w", c.Name, err)
	}
	return p, nil
}

func waitSocket(ctx context.Context, p *proc.Process, path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if conn, err := net.Dial("unix", path); err == nil {
			conn.Close()
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("exited: %v", p.Err())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no socket %s after %s", path, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Down stops a node: the kubelet, then everything in its cgroup subtree
// (containers, shims, containerd), then its mounts and files. It works
// from the record alone, after the process that started the node died.
func Down(s State, keepLogs bool) error {
	var errs []error
	for _, r := range s.Processes {
		if err := r.Stop(5 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if s.CgroupParent != "" {
		if err := SweepCgroup(s.CgroupParent, 30*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if s.Network != "" {
		// libcni's cache of the pods' network results, machine-wide:
		// this node's network's entries, and the loopback network's of
		// this node's sandboxes (containerd names that one cni-loopback).
		matches, _ := filepath.Glob(filepath.Join(CNICacheDir, "results", s.Network+"-*"))
		sandboxes, _ := filepath.Glob(filepath.Join(s.Dir, "containerd", "*", "io.containerd.grpc.v1.cri", "sandboxes", "*"))
		for _, sb := range sandboxes {
			matches = append(matches, filepath.Join(CNICacheDir, "results", "cni-loopback-"+filepath.Base(sb)+"-lo"))
		}
		for _, m := range matches {
			if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if s.ShimDir != "" {
		// The sockets of shims that were killed; the directory's parent
		// is shared with the other nodes, and goes when it is empty.
		if err := os.RemoveAll(s.ShimDir); err != nil {
			errs = append(errs, err)
		}
		_ = os.Remove(filepath.Dir(s.ShimDir))
		_ = os.Remove(filepath.Dir(filepath.Dir(s.ShimDir)))
	}
	if s.Dir != "" {
		if err := UnmountUnder(s.Dir); err != nil {
			errs = append(errs, err)
		} else if !keepLogs {
			if err := os.RemoveAll(s.Dir); err != nil {
				errs = append(errs, err)
			}
		} else {
			for _, d := range []string{"containerd/root", "containerd/state", "kubelet"} {
				if err := os.RemoveAll(filepath.Join(s.Dir, d)); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}
