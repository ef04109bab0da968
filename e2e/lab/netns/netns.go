// Package netns runs Go code inside a named network namespace (one created
// with `ip netns add`), so lab tests can open real sockets from a node, the
// client or the router without shelling out.
package netns

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Dir is where `ip netns` keeps its namespace handles.
const Dir = "/var/run/netns"

// Do runs fn with the calling goroutine's thread switched into the named
// namespace. Sockets created inside fn belong to that namespace for their
// whole life, so fn may return a listener or connection for later use.
func Do(name string, fn func() error) error {
	target, err := os.Open(filepath.Join(Dir, name))
	if err != nil {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer self.Close()

	if err := setns(target.Fd()); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", name, err)
	}
	fnErr := fn()
	if err := setns(self.Fd()); err != nil {
		// The thread is stuck in the other namespace: keep it locked so
		// the runtime throws it away instead of reusing it.
		return fmt.Errorf("leave netns %s: %w", name, err)
	}
	runtime.UnlockOSThread()
	return fnErr
}

func setns(fd uintptr) error { return unix.Setns(int(fd), unix.CLONE_NEWNET) }

// Run runs a command inside the named namespace (`ip netns exec`) and
// returns its combined output; a failure's error includes the output.
func Run(ctx context.Context, name string, args ...string) (string, error) {
	if len(args) == 0 {
		return "", fmt.Errorf("netns %s: no command", name)
	}
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("[%s] %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
