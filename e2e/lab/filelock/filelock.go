// Package filelock takes exclusive flock(2) locks on files, so that two
// processes (a make target and a test, two tests) do not build the same
// cache or bring up a lab at the same time.
package filelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// poll is how often a waiting Acquire tries the lock again.
const poll = 100 * time.Millisecond

// Acquire takes an exclusive lock on path (created if missing) and
// returns the function that releases it. When another process holds the
// lock it calls waiting once (if not nil) and tries again until it gets
// the lock or ctx ends.
func Acquire(ctx context.Context, path string, waiting func()) (release func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for said := false; ; said = true {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !said && waiting != nil {
			waiting()
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
		case <-time.After(poll):
		}
	}
}
