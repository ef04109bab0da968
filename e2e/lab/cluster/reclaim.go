package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"

	"github.com/herald-lb/herald/e2e/lab/controlplane"
	"github.com/herald-lb/herald/e2e/lab/statefile"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// owner is the machine-wide record of the lab that is up
// (topology.OwnerPath).
type owner struct {
	Prefix   string `json:"prefix"`
	StateDir string `json:"stateDir"`
}

func writeOwner(prefix, dir string) error {
	return statefile.Write(topology.OwnerPath, owner{Prefix: prefix, StateDir: dir})
}

// dropOwner removes the record if it names dir.
func dropOwner(dir string) {
	if o, err := statefile.Read[owner](topology.OwnerPath); err == nil && o.StateDir == dir {
		_ = os.Remove(topology.OwnerPath)
	}
}

// reclaimer returns the function topology.Lock calls when it finds a lab
// up: it takes that lab down if nothing of it runs any more.
func reclaimer(log io.Writer) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) { return ReclaimDead(ctx, log) }
}

// ReclaimDead takes down the lab that is up on this machine if none of its
// processes lives: no recorded control plane, kubelet or router process,
// and no process in any of its network namespaces. A live lab, whoever
// started it, is left alone. It tells whether it took a lab down.
//
// With the owner record and the lab's state file, the lab goes down as
// `herald-lab down` would take it (logs kept). Without them (the state
// directory was removed) it removes what the prefix names: the topology's
// namespaces and links, and the pods' namespaces ("<prefix>-pod-*").
// With no lab up, it removes the host's unreachable routes of the lab that
// a killed run left without any lab's bridge (topology.RemoveStrayRoutes).
func ReclaimDead(ctx context.Context, log io.Writer) (bool, error) {
	if log == nil {
		log = io.Discard
	}
	prefix, up, err := topology.UpPrefix(ctx)
	if err != nil {
		return false, err
	}
	if !up {
		removed, err := topology.RemoveStrayRoutes(ctx, topology.Exec{})
		if removed {
			fmt.Fprintf(log, "lab: removed the host's unreachable routes of a lab that a killed run left\n")
		}
		return removed, err
	}
	var state *State
	if o, err := statefile.Read[owner](topology.OwnerPath); err == nil && o.Prefix == prefix {
		if s, err := ReadState(o.StateDir); err == nil && s.Prefix == prefix {
			state = &s
		}
	}
	existing, err := topology.Observe(ctx)
	if err != nil {
		return false, err
	}
	namespaces := labNamespaces(existing, prefix)
	if live := liveProcesses(ctx, state, namespaces); len(live) > 0 {
		return false, nil
	}
	fmt.Fprintf(log, "lab: the lab %q is up but nothing of it runs (a killed run left it); taking it down\n", prefix)
	var errs []error
	if state != nil {
		errs = append(errs, Down(ctx, state.StateDir, DownOptions{KeepLogs: true, Log: log}))
	}
	// Whatever the state file did not name, or all of it without one.
	if existing, err = topology.Observe(ctx); err != nil {
		return false, err
	}
	for _, ns := range podNamespaces(existing, prefix) {
		if err := exec.CommandContext(ctx, "ip", "netns", "delete", ns).Run(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns delete %s: %w", ns, err))
		}
	}
	errs = append(errs, topology.Down(ctx, topology.Exec{}, prefix))
	if err := errors.Join(errs...); err != nil {
		return false, fmt.Errorf("taking down the dead lab %q: %w", prefix, err)
	}
	_ = os.Remove(topology.OwnerPath)
	return true, nil
}

// labNamespaces are the network namespaces whose names carry the lab's
// prefix: the topology's and the pods'.
func labNamespaces(e topology.Existing, prefix string) []string {
	var out []string
	for ns := range e.Netns {
		if strings.HasPrefix(ns, prefix+"-") {
			out = append(out, ns)
		}
	}
	sort.Strings(out)
	return out
}

func podNamespaces(e topology.Existing, prefix string) []string {
	var out []string
	for _, ns := range labNamespaces(e, prefix) {
		if strings.HasPrefix(ns, prefix+"-pod-") {
			out = append(out, ns)
		}
	}
	return out
}

// liveProcesses lists what still runs of a lab: its recorded processes
// and any process inside its namespaces.
func liveProcesses(ctx context.Context, s *State, namespaces []string) []string {
	var live []string
	if s != nil {
		if cp, err := controlplane.ReadState(s.ControlPlaneDir); err == nil {
			for _, p := range cp.Processes {
				if p.Alive() {
					live = append(live, fmt.Sprintf("%s (pid %d)", p.Name, p.PID))
				}
			}
		}
		for _, k := range s.Kubelets {
			if k.Process.Alive() {
				live = append(live, fmt.Sprintf("kubelet of %s (pid %d)", k.Node, k.Process.PID))
			}
		}
		for _, p := range s.FRR {
			if p.Alive() {
				live = append(live, fmt.Sprintf("%s (pid %d)", p.Name, p.PID))
			}
		}
	}
	for _, ns := range namespaces {
		out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
		if err != nil {
			// Unreadable: count it as alive rather than tear down a lab
			// that may be in use.
			live = append(live, "namespace "+ns+": "+err.Error())
			continue
		}
		if pids := strings.Fields(string(out)); len(pids) > 0 {
			live = append(live, fmt.Sprintf("namespace %s: pids %s", ns, strings.Join(pids, " ")))
		}
	}
	return live
}
