package proxy

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestNextWait(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		last, now time.Time
		want      time.Duration
	}{
		{time.Time{}, t0, 0},
		{t0, t0, time.Second},
		{t0, t0.Add(300 * time.Millisecond), 700 * time.Millisecond},
		{t0, t0.Add(time.Second), 0},
		{t0, t0.Add(time.Hour), 0},
	} {
		if got := nextWait(time.Second, c.last, c.now); got != c.want {
			t.Errorf("nextWait(1s, %v, %v) = %v, want %v", c.last, c.now, got, c.want)
		}
	}
}

type syncLog struct {
	mu       sync.Mutex
	at       []time.Time
	periodic []bool
	fail     int // fail this many syncs first
}

func (l *syncLog) sync(_ context.Context, periodic bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at = append(l.at, time.Now())
	l.periodic = append(l.periodic, periodic)
	if l.fail > 0 {
		l.fail--
		return true
	}
	return false
}

func (l *syncLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.at)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLoopMinInterval(t *testing.T) {
	const minI = 150 * time.Millisecond
	l := NewLoop(minI, time.Hour)
	var log syncLog
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx, log.sync); close(done) }()
	waitFor(t, "the first sync", func() bool { return log.count() == 1 })

	// A burst of 50 requests over ~400ms.
	for range 50 {
		l.Request()
		time.Sleep(8 * time.Millisecond)
	}
	time.Sleep(2 * minI)
	cancel()
	<-done
	log.mu.Lock()
	defer log.mu.Unlock()
	n := len(log.at)
	// At most one sync per interval: 1 + 400ms/150ms + 1 trailing.
	if n < 3 || n > 6 {
		t.Errorf("%d syncs for a 400ms burst with a %s minimum interval", n, minI)
	}
	for i := 1; i < n; i++ {
		if gap := log.at[i].Sub(log.at[i-1]); gap < minI-5*time.Millisecond {
			t.Errorf("syncs %d and %d only %s apart", i-1, i, gap)
		}
		if log.periodic[i] {
			t.Errorf("sync %d periodic", i)
		}
	}
}

func TestLoopPeriodicAndRetry(t *testing.T) {
	l := NewLoop(20*time.Millisecond, 100*time.Millisecond)
	log := syncLog{fail: 2}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx, log.sync); close(done) }()
	// Two failures, retried after the minimum interval, then twice that,
	// then quiet until the periodic sync.
	waitFor(t, "a periodic sync", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		for _, p := range log.periodic {
			if p {
				return true
			}
		}
		return false
	})
	cancel()
	<-done
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.at) < 4 {
		t.Fatalf("%d syncs", len(log.at))
	}
	if log.periodic[1] || log.periodic[2] {
		t.Error("retries counted as periodic")
	}
	if gap := log.at[2].Sub(log.at[1]); gap > 90*time.Millisecond {
		t.Errorf("retry came after %s, want about the minimum interval", gap)
	}
	if gap := log.at[3].Sub(log.at[2]); gap < 90*time.Millisecond {
		t.Errorf("periodic sync came %s after the last, want the maximum interval", gap)
	}
}

func TestRetryDelayBacksOff(t *testing.T) {
	var got []time.Duration
	for n := 1; n <= 7; n++ {
		got = append(got, retryDelay(time.Second, 30*time.Second, n))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("retry delays %v, want %v", got, want)
	}
	if d := retryDelay(0, 30*time.Second, 1); d != time.Second {
		t.Errorf("with no minimum interval: %v, want 1s", d)
	}
}
