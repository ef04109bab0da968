package proxy

import (
	"context"
	"time"
)

// Loop runs syncs: when asked (Request), never more often than
// MinInterval, and at least every MaxInterval (a periodic full resync).
// Requests that arrive while a sync waits or runs are folded into the
// next one, so a burst of changes costs one sync per MinInterval.
type Loop struct {
	MinInterval, MaxInterval time.Duration
	kick                     chan struct{}
}

// NewLoop makes a loop.
func NewLoop(minInterval, maxInterval time.Duration) *Loop {
	return &Loop{MinInterval: minInterval, MaxInterval: maxInterval, kick: make(chan struct{}, 1)}
}

// Request asks for a sync; it never blocks.
func (l *Loop) Request() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// nextWait is how long to wait before running a requested sync: what is
// left of MinInterval since the last one.
func nextWait(minInterval time.Duration, last, now time.Time) time.Duration {
	if last.IsZero() {
		return 0
	}
	if d := minInterval - now.Sub(last); d > 0 {
		return d
	}
	return 0
}

// Run calls sync until ctx ends, first at once. sync gets periodic=true
// when MaxInterval passed without a request, and returns whether to try
// again because something failed: after MinInterval, then twice as long
// after each further failure, up to MaxInterval, as kube-proxy backs off
// a failing iptables-restore instead of retrying it every second.
func (l *Loop) Run(ctx context.Context, sync func(ctx context.Context, periodic bool) (retry bool)) {
	var last time.Time
	periodic := time.NewTimer(0)
	defer periodic.Stop()
	var retry *time.Timer
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	first := true
	failures := 0
	for {
		isPeriodic := false
		if first {
			first = false
		} else {
			select {
			case <-ctx.Done():
				return
			case <-l.kick:
			case <-periodic.C:
				isPeriodic = true
			}
		}
		if d := nextWait(l.MinInterval, last, time.Now()); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		// Whatever was requested until now is in this sync.
		select {
		case <-l.kick:
		default:
		}
		last = time.Now()
		again := sync(ctx, isPeriodic)
		if !periodic.Stop() {
			select {
			case <-periodic.C:
			default:
			}
		}
		periodic.Reset(l.MaxInterval)
		if !again {
			failures = 0
			continue
		}
		failures++
		if retry != nil {
			retry.Stop()
		}
		retry = time.AfterFunc(retryDelay(l.MinInterval, l.MaxInterval, failures), l.Request)
	}
}

// retryDelay is the wait before the retry after the n-th failure in a
// row: minInterval (a second when there is none) doubled n-1 times, at
// most maxInterval.
func retryDelay(minInterval, maxInterval time.Duration, n int) time.Duration {
	d := minInterval
	if d <= 0 {
		d = time.Second
	}
	for i := 1; i < n && d < maxInterval; i++ {
		d *= 2
	}
	return min(d, maxInterval)
}
