package kubelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/herald-lb/herald/e2e/lab/netns"
	"github.com/herald-lb/herald/e2e/lab/proc"
	"github.com/herald-lb/herald/e2e/lab/statefile"
)

// StateFile is the kubelet's state file inside its state directory. It
// lists every pod namespace, veth and process the kubelet created, before
// it creates them, so Down can remove them after a crash.
const StateFile = "kubelet.json"

// State is the content of the state file.
type State struct {
	NodeName  string      `json:"nodeName"`
	NodeNetns string      `json:"nodeNetns"`
	Pods      []PodRecord `json:"pods"`
}

// PodRecord is what the kubelet created for one pod.
type PodRecord struct {
	UID       types.UID `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	// Netns is the pod's own network namespace; empty for hostNetwork
	// pods, which run in the node's.
	Netns    string `json:"netns,omitempty"`
	HostVeth string `json:"hostVeth,omitempty"`
	IP       string `json:"ip,omitempty"`
	IPv6     string `json:"ipv6,omitempty"`
	// LogDir holds one log file per container.
	LogDir string `json:"logDir"`
	// Processes maps a container name to its running process.
	Processes map[string]proc.Record `json:"processes,omitempty"`
}

// PodsDir, inside the state directory, holds a directory per pod
// (<namespace>_<name>_<uid>) with one log file per container; it is also
// the containers' working directory.
const PodsDir = "pods"

func statePath(dir string) string { return filepath.Join(dir, StateFile) }

// ReadState reads the state file in dir.
func ReadState(dir string) (State, error) {
	s, err := statefile.Read[State](statePath(dir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("kubelet: %w", err)
	}
	return s, err
}

func writeState(dir string, s State) error { return statefile.Write(statePath(dir), s) }

// DownOptions tune Down.
type DownOptions struct {
	// Grace is how long each process gets between SIGTERM and SIGKILL.
	// Default 2s.
	Grace time.Duration
	// KeepLogs keeps the containers' log files.
	KeepLogs bool
	// Log receives progress lines. Nil: discard.
	Log io.Writer
}

// Down removes what a kubelet with state directory dir left behind: it
// stops the recorded container processes (by PID and start time, so a
// reused PID is never hit), removes image mode's runc containers,
// bundles and cgroups, deletes the pods' network namespaces and veths,
// and removes the state file. The kubelet process itself must be
// stopped first. A directory without a state file is not an error.
func Down(dir string, opts DownOptions) error {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Grace <= 0 {
		opts.Grace = 2 * time.Second
	}
	s, err := ReadState(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range s.Pods {
		for name, r := range p.Processes {
			if r.Alive() {
				fmt.Fprintf(opts.Log, "kubelet: stopping container %s of %s/%s (pid %d)\n", name, p.Namespace, p.Name, r.PID)
			}
			if err := r.Stop(opts.Grace); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Image mode's containers (a recorded process above may have been
	// one's first process), bundles and cgroups.
	if err := runtimeDown(context.Background(), dir, s.NodeNetns, opts.Log); err != nil {
		errs = append(errs, err)
	}
	for _, p := range s.Pods {
		if err := removePodNetwork(context.Background(), s.NodeNetns, p); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if !opts.KeepLogs {
		if err := os.RemoveAll(filepath.Join(dir, PodsDir)); err != nil {
			return err
		}
	}
	if err := os.Remove(statePath(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// removePodNetwork deletes a pod's namespace (which destroys its veth
// pair) and, should the node side have survived, the node-side veth.
func removePodNetwork(ctx context.Context, nodeNetns string, p PodRecord) error {
	if p.Netns == "" {
		return nil
	}
	var errs []error
	if netnsExists(p.Netns) {
		if err := ipCmd(ctx, "netns", "delete", p.Netns); err != nil {
			errs = append(errs, err)
		}
	}
	if p.HostVeth != "" && nodeNetns != "" && netnsExists(nodeNetns) {
		// The kernel dismantles a namespace asynchronously: the veth's
		// node end goes a moment after `ip netns delete`.
		exists := func() bool { return ipCmd(ctx, "-n", nodeNetns, "link", "show", "dev", p.HostVeth) == nil }
		deadline := time.Now().Add(5 * time.Second)
		for exists() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if exists() {
			if err := ipCmd(ctx, "-n", nodeNetns, "link", "delete", "dev", p.HostVeth); err != nil && exists() {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func netnsExists(name string) bool {
	_, err := os.Stat(filepath.Join(netns.Dir, name))
	return err == nil
}

// ipCmd runs `ip args...` and returns its output in the error when it
// fails.
func ipCmd(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "ip", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
