package filelock

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestAcquireWaitsAndCancels(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	release, err := Acquire(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to the open file description: a second Acquire
	// in the same process contends like another process would.
	waited := 0
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Acquire(ctx, path, func() { waited++ }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Acquire while held: %v, want the deadline", err)
	}
	if waited != 1 {
		t.Errorf("waiting called %d times, want once", waited)
	}
	got := make(chan error, 1)
	go func() {
		r, err := Acquire(context.Background(), path, nil)
		if err == nil {
			r()
		}
		got <- err
	}()
	time.Sleep(150 * time.Millisecond)
	release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire did not get the lock after its release")
	}
}
