package proc

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestStartStop(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sleep.log")
	p, err := Start(Spec{Name: "sleep", Path: "/bin/sh", Args: []string{"-c", "echo hello; exec sleep 60"}, LogPath: log, KillWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.StartTime == 0 || !p.Record.Alive() {
		t.Fatalf("record %+v not alive", p.Record)
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !p.Exited() || p.Record.Alive() {
		t.Fatal("process alive after Stop")
	}
	data, _ := os.ReadFile(log)
	if !strings.Contains(string(data), "hello") {
		t.Errorf("log lacks the output: %q", data)
	}
}

func TestStopEscalatesToKill(t *testing.T) {
	log := filepath.Join(t.TempDir(), "stubborn.log")
	p, err := Start(Spec{Name: "stubborn", Path: "/bin/sh", Args: []string{"-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done"}, LogPath: log, KillWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ { // let the shell install its trap
		if data, _ := os.ReadFile(log); strings.Contains(string(data), "\nready\n") { // not the header line
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	if err := p.Stop(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("stopped after %s: SIGTERM was not ignored?", d)
	}
}

func TestRecordStopAndPIDReuse(t *testing.T) {
	p, err := Start(Spec{Name: "sleep", Path: "/bin/sleep", Args: []string{"60"}, LogPath: filepath.Join(t.TempDir(), "l"), KillWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	// A record with the right PID but another start time is a different
	// process: not alive, and Stop leaves it alone.
	stranger := p.Record
	stranger.StartTime++
	if stranger.Alive() {
		t.Fatal("record with a wrong start time counts as alive")
	}
	if err := stranger.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Exited() {
		t.Fatal("Stop of a mismatched record killed the process")
	}
	// The real record stops it without being its parent's Wait.
	if err := p.Record.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("process did not exit")
	}
}

// The main goroutine keeps the main thread, which the runtime never ends,
// so the goroutine below runs on a thread that does end.
func init() { runtime.LockOSThread() }

func TestKillWithParentSurvivesTheStartingThreadEnding(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sleep.log")
	started := make(chan *Process, 1)
	go func() {
		// Locked and never unlocked: the runtime ends this thread when
		// the goroutine returns, and the kernel then sends Pdeathsig to
		// the children it forked.
		runtime.LockOSThread()
		p, err := Start(Spec{Name: "sleep", Path: "/bin/sleep", Args: []string{"60"}, LogPath: log, KillWithParent: true})
		if err != nil {
			t.Error(err)
		}
		started <- p
	}()
	p := <-started
	if p == nil {
		t.FailNow()
	}
	t.Cleanup(func() { _ = p.Stop(time.Second) })
	select {
	case <-p.Done():
		t.Fatalf("the child died when the thread that called Start ended: %v", p.Err())
	case <-time.After(time.Second):
	}
}
