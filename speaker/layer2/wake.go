package layer2

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Wake tells whether this process has been running without a long pause
// lately. A speaker that was stopped or starved of CPU for longer than
// memberlist's probes allow was declared dead by the others, and one of
// them took its addresses. When it runs again it still believes it holds
// them until memberlist's gossip tells it otherwise, a moment later: the
// requests that queued on its sockets meanwhile, and a burst's timer
// that fired late, would answer for an address another node holds now,
// and pull its clients back for that moment. Seen in the lab: a speaker
// frozen for 3 s answered one queued request 55 ms before it learned of
// its death, and the client went to it and back (issue #36).
type Wake struct {
	// Pause is the longest gap between ticks that is not a pause.
	Pause time.Duration
	// Quiet is how long after a pause the responders stay silent: time
	// for memberlist to learn whether the others declared this node dead.
	Quiet time.Duration

	mu    sync.Mutex
	last  time.Time // last tick
	quiet time.Time // silent until then
}

// NewWake returns a Wake that counts a gap of more than pause as a pause
// and keeps quiet for quiet after it, as of now.
func NewWake(pause, quiet time.Duration, now time.Time) *Wake {
	return &Wake{Pause: pause, Quiet: quiet, last: now}
}

// DefaultWakeTick, DefaultPause and DefaultQuiet are the speaker's: it
// ticks every 100 ms; 500 ms without a tick is more than a CPU-starved
// process waits for a CPU (160 ms at most in the stress tests), and
// about what memberlist's probes and suspicion take to declare a member
// dead; a second of quiet lets gossip reach it (the refutation came
// within 150 ms in the lab).
const (
	DefaultWakeTick = 100 * time.Millisecond
	DefaultPause    = 500 * time.Millisecond
	DefaultQuiet    = time.Second
)

// Tick records that the process ran at now and returns the pause that
// ended, if any.
func (w *Wake) Tick(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	gap := now.Sub(w.last)
	w.last = now
	if gap <= w.Pause {
		return 0
	}
	w.quiet = now.Add(w.Quiet)
	return gap
}

// Awake reports whether answering for addresses is safe at now: the last
// tick is recent (a responder may run first after a pause, before the
// ticker) and no pause ended within Quiet.
func (w *Wake) Awake(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return now.Sub(w.last) <= w.Pause && !now.Before(w.quiet)
}

// Run ticks every tick until ctx ends, logging each pause it ends.
func (w *Wake) Run(ctx context.Context, tick time.Duration, log *slog.Logger) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// The clock, not the ticker's time: that is when the tick was
			// due, not when this goroutine ran.
			if gap := w.Tick(time.Now()); gap > 0 && log != nil {
				log.Warn("this process did not run for a while; not answering ARP/NDP for a moment, so that a late answer does not pull an address from a node that took it meanwhile",
					"paused", gap.Round(time.Millisecond), "quiet", w.Quiet)
			}
		}
	}
}
