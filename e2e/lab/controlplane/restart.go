package controlplane

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/herald-lb/herald/e2e/lab/proc"
)

// StopComponent stops one running component (SIGTERM, then SIGKILL after
// grace) and leaves the others and every file alone, so a test can take
// the API server or etcd away and bring it back with StartComponent.
func (cp *ControlPlane) StopComponent(name string, grace time.Duration) error {
	i, err := cp.component(name)
	if err != nil {
		return err
	}
	if err := cp.procs[i].Stop(grace); err != nil {
		return err
	}
	fmt.Fprintf(cp.log, "controlplane: %s stopped\n", name)
	return nil
}

// StartComponent starts a component stopped by StopComponent again with
// the arguments it had, records its new PID in the state file in the old
// one's place (Down stops it, in the same order), and waits until it is
// healthy. A component still running is an error.
func (cp *ControlPlane) StartComponent(ctx context.Context, name string) error {
	i, err := cp.component(name)
	if err != nil {
		return err
	}
	if !cp.procs[i].Exited() {
		return fmt.Errorf("controlplane: %s (pid %d) is still running", name, cp.procs[i].PID)
	}
	spec, ok := cp.specs[name]
	if !ok {
		return fmt.Errorf("controlplane: no start spec for %s", name)
	}
	fmt.Fprintf(cp.log, "controlplane: starting %s again\n", name)
	p, err := proc.Start(spec) // with KillWithParent, from a thread of its own
	if err != nil {
		return err
	}
	cp.procs[i] = p
	for j := range cp.state.Processes {
		if cp.state.Processes[j].Name == name {
			cp.state.Processes[j] = p.Record
		}
	}
	if err := cp.saveState(); err != nil {
		return err
	}
	return cp.waitHealthy(ctx, name)
}

// component is the index of name's process.
func (cp *ControlPlane) component(name string) (int, error) {
	for i, p := range cp.procs {
		if p.Name == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("controlplane: no component %q", name)
}

// waitHealthy waits for a restarted component's health endpoint, as Up
// does for it.
func (cp *ControlPlane) waitHealthy(ctx context.Context, name string) error {
	local := func(port int, path string) string {
		return "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + path
	}
	switch name {
	case Etcd:
		return cp.waitHTTP(ctx, Etcd, cp.state.EtcdURL+"/health", nil, func(body string) bool {
			return strings.Contains(body, `"health":"true"`)
		})
	case APIServer:
		return cp.waitHTTP(ctx, APIServer, cp.state.APIServerURL+"/readyz", cp.adminClient(), okBody)
	case ControllerManager:
		return cp.waitHTTP(ctx, ControllerManager, local(cp.cmPort, "/healthz"), cp.adminClient(), okBody)
	case Scheduler:
		return cp.waitHTTP(ctx, Scheduler, local(cp.schedPort, "/healthz"), cp.adminClient(), okBody)
	}
	return nil
}
