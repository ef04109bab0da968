package topology

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/herald-lb/herald/e2e/lab/filelock"
)

// LockPath is the machine-wide lock of the lab's address plan. Every lab
// gives the host the same LAN address (HostLANv4) and routes to the same
// node addresses, whatever its prefix, so two labs up at once break each
// other's host traffic; tests that bring a lab up hold this lock for the
// lab's lifetime (go test runs packages in parallel).
var LockPath = filepath.Join(lockDir(), "herald-lab.lock")

// OwnerPath records the lab that is up (its prefix and state directory)
// so that a later lab can tell a dead one from a live one and take it
// down: a killed test run, or a machine restored from a snapshot, leaves
// the network behind with nothing running to remove it.
var OwnerPath = filepath.Join(lockDir(), "herald-lab.owner")

func lockDir() string {
	if st, err := os.Stat("/run/lock"); err == nil && st.IsDir() {
		return "/run/lock"
	}
	return os.TempDir()
}

// Lock waits until no other process holds the lab lock and no lab is up
// (a lab brought up by `herald-lab up` outlives its lock), then holds the
// lock until the returned release function is called (or the process
// exits). While it holds the lock and finds a lab up, it calls reclaim
// (if not nil), which takes the lab down if nothing of it runs any more
// and tells whether it did.
func Lock(ctx context.Context, reclaim func(context.Context) (bool, error)) (release func(), err error) {
	for {
		release, err := flock(ctx)
		if err != nil {
			return nil, err
		}
		up, err := LabUp(ctx)
		if err == nil && up && reclaim != nil {
			var gone bool
			if gone, err = reclaim(ctx); err == nil && gone {
				up, err = LabUp(ctx)
			}
		}
		if err != nil || !up {
			if err != nil {
				release()
			}
			return release, err
		}
		release()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the lab that is up on this machine to go down (`herald-lab down` takes it down if nothing of it runs): %w", ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// LabUp tells whether a lab is up on this machine: the host has the lab's
// LAN address.
func LabUp(ctx context.Context) (bool, error) {
	_, up, err := UpPrefix(ctx)
	return up, err
}

// UpPrefix returns the prefix of the lab that is up on this machine: the
// one whose bridge ("<prefix>-lan") holds the host's LAN address.
func UpPrefix(ctx context.Context) (prefix string, up bool, err error) {
	e, err := Observe(ctx)
	if err != nil {
		return "", false, err
	}
	for dev, addrs := range e.AddrsByLink {
		for _, a := range addrs {
			if a.Addr() == HostLANv4 {
				return strings.TrimSuffix(dev, "-lan"), true, nil
			}
		}
	}
	return "", false, nil
}

func flock(ctx context.Context) (release func(), err error) {
	release, err = filelock.Acquire(ctx, LockPath, nil)
	if err != nil {
		return nil, fmt.Errorf("waiting for another lab to finish: %w", err)
	}
	return release, nil
}
