package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/herald-lb/herald/e2e/lab/controlplane"
	"github.com/herald-lb/herald/e2e/lab/kubelet"
	"github.com/herald-lb/herald/e2e/lab/router"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// KubeletGrace is how long a kubelet gets to stop its pods on SIGTERM.
const KubeletGrace = 20 * time.Second

// DownOptions tune Down.
type DownOptions struct {
	// KeepLogs keeps the logs (and the state directory holding them).
	KeepLogs bool
	// Log receives progress; nil discards it.
	Log io.Writer
}

// Down removes the lab recorded in dir: kubelets and their pods (herald's
// included),
// the control plane, the network, the mount points, then the state
// directory. It works from the state file alone, so it also cleans up
// after a crashed `up` or test. Every step runs even when an earlier one
// failed; the errors are joined. A directory without a lab is not an
// error.
func Down(ctx context.Context, dir string, opts DownOptions) error {
	log := opts.Log
	if log == nil {
		log = io.Discard
	}
	s, err := ReadState(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	step := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	for _, k := range s.Kubelets {
		if k.Process.Alive() {
			fmt.Fprintf(log, "lab: stopping the kubelet of %s (pid %d)\n", k.Node, k.Process.PID)
		}
		step("stopping the kubelet of "+k.Node, k.Process.Stop(KubeletGrace))
		// Whatever a killed kubelet could not tear down.
		step("pods of "+k.Node, kubelet.Down(k.StateDir, kubelet.DownOptions{KeepLogs: opts.KeepLogs, Log: log}))
	}
	for _, err := range downRealNodes(s, opts.KeepLogs, func(f string, a ...any) { fmt.Fprintf(log, f+"\n", a...) }) {
		step("real nodes", err)
	}
	if len(s.FRR) > 0 {
		fmt.Fprintf(log, "lab: stopping FRR in the router namespace\n")
		step("router", router.StopRecorded(s.FRR, router.StopGrace))
	}
	if s.ControlPlaneDir != "" {
		step("control plane", controlplane.Down(s.ControlPlaneDir, controlplane.DownOptions{
			StopOptions: controlplane.StopOptions{KeepLogs: opts.KeepLogs},
			Log:         log,
		}))
	}
	step("network", topology.Down(ctx, topology.Exec{}, s.Prefix))
	step("mount points", kubelet.RemoveMountPoints(s.CreatedDirs))
	if len(errs) > 0 {
		// Keep the state file: the next down retries what is left.
		return errors.Join(errs...)
	}
	dropOwner(dir)
	// The unpacked images are no logs: they go in any case.
	if err := os.RemoveAll(filepath.Join(dir, imagesDir)); err != nil {
		return err
	}
	if opts.KeepLogs {
		fmt.Fprintf(log, "lab: logs kept in %s\n", dir)
		return os.Remove(statePath(dir))
	}
	return removeStateDir(dir)
}

// removeStateDir removes the lab's state directory: only the entries the
// lab makes, then the directory itself if that leaves it empty.
func removeStateDir(dir string) error {
	var errs []error
	for _, name := range []string{"controlplane", "nodes", "herald", "router", imagesDir, StateFile} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		_ = os.Remove(dir) // only if empty
	}
	return errors.Join(errs...)
}

// Down stops this lab (see the package function Down).
func (l *Lab) Down(ctx context.Context, opts DownOptions) error {
	if opts.Log == nil {
		opts.Log = l.log
	}
	err := Down(ctx, l.StateDir, opts)
	if l.unlock != nil {
		l.unlock()
		l.unlock = nil
	}
	return err
}

// Unhealthy lists what is wrong with a recorded lab: not fully up, or
// processes gone. Empty means it can be used.
func Unhealthy(s State) []string {
	var bad []string
	if s.Phase != "up" {
		bad = append(bad, "phase "+s.Phase)
	}
	if cp, err := controlplane.ReadState(s.ControlPlaneDir); err != nil {
		bad = append(bad, "control plane: "+err.Error())
	} else {
		for _, p := range cp.Processes {
			if !p.Alive() {
				bad = append(bad, p.Name+" gone")
			}
		}
	}
	for _, k := range s.Kubelets {
		if !k.Process.Alive() {
			bad = append(bad, "kubelet of "+k.Node+" gone")
		}
	}
	for _, p := range s.FRR {
		if !p.Alive() {
			bad = append(bad, "router "+p.Name+" gone")
		}
	}
	for _, p := range s.realNodeProcesses() {
		if !p.Alive() {
			bad = append(bad, p.Name+" gone")
		}
	}
	return bad
}
