// Package netnstest puts a kernel test into a network namespace of its
// own, so that what it programs (links, routes, rules, conntrack) touches
// nothing else on the machine.
package netnstest

import (
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// Enter skips the test without root (purpose says what root is needed for),
// locks the test's goroutine to its thread and moves the thread into a new
// network namespace; the thread goes back when the test ends. Call it from
// the test's own goroutine: sockets and netlink calls made on it later
// act in the namespace.
func Enter(t *testing.T, purpose string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for " + purpose)
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	ns, err := netns.New() // also moves this thread into it
	if err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		t.Skipf("no new network namespace: %v", err)
	}
	t.Cleanup(func() {
		// A thread that cannot go back stays locked, and the runtime
		// throws it away with the goroutine.
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		ns.Close()
		orig.Close()
	})
}
