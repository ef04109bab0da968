package pause

import (
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func run(t *testing.T, args []string, pid int, sigs ...os.Signal) (code, reaps int, stdout, stderr string) {
	t.Helper()
	ch := make(chan os.Signal, len(sigs))
	for _, s := range sigs {
		ch <- s
	}
	close(ch)
	var out, errOut strings.Builder
	code = Main(args, pid, ch, func() int { reaps++; return 1 }, &out, &errOut)
	return code, reaps, out.String(), errOut.String()
}

func TestMainSignals(t *testing.T) {
	for _, tc := range []struct {
		name         string
		args         []string
		pid          int
		sigs         []os.Signal
		code, reaps  int
		stdout, warn string
	}{
		{name: "SIGTERM as PID 1", pid: 1, sigs: []os.Signal{syscall.SIGTERM}, warn: "Shutting down, got signal: terminated\n"},
		{name: "SIGINT", pid: 1, sigs: []os.Signal{syscall.SIGINT}, warn: "Shutting down, got signal: interrupt\n"},
		{name: "not PID 1 warns", pid: 77, sigs: []os.Signal{syscall.SIGTERM},
			warn: "Warning: pause should be the first process\nShutting down, got signal: terminated\n"},
		{name: "reaps on each SIGCHLD until the end", pid: 1,
			sigs:  []os.Signal{syscall.SIGCHLD, syscall.SIGHUP, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGCHLD},
			reaps: 2, warn: "Shutting down, got signal: terminated\n"},
		{name: "-v", args: []string{"-v"}, pid: 1, stdout: Version + "\n"},
		{name: "-V after others", args: []string{"x", "-V"}, pid: 9, stdout: Version + "\n"},
		{name: "other arguments are ignored", args: []string{"--whatever"}, pid: 1, sigs: []os.Signal{syscall.SIGTERM},
			warn: "Shutting down, got signal: terminated\n"},
		{name: "no more signals", pid: 1, sigs: []os.Signal{syscall.SIGCHLD}, code: 42, reaps: 1,
			warn: "Error: the signal channel closed\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, reaps, stdout, stderr := run(t, tc.args, tc.pid, tc.sigs...)
			if code != tc.code || reaps != tc.reaps || stdout != tc.stdout || stderr != tc.warn {
				t.Errorf("code %d reaps %d stdout %q stderr %q; want %d %d %q %q", code, reaps, stdout, stderr, tc.code, tc.reaps, tc.stdout, tc.warn)
			}
		})
	}
}

func TestReapChildren(t *testing.T) {
	var pids []int
	for range 3 {
		pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{})
		if err != nil {
			t.Skipf("cannot start /bin/true: %v", err)
		}
		pids = append(pids, pid)
	}
	// Each becomes a zombie once it exits; wait until all have.
	for _, pid := range pids {
		for {
			// WNOWAIT leaves the child to ReapChildren.
			var info unix.Siginfo
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err == nil {
				break
			}
			if err != unix.EINTR {
				t.Fatalf("waitid %d: %v", pid, err)
			}
		}
	}
	if n := ReapChildren(); n != len(pids) {
		t.Errorf("reaped %d children, want %d", n, len(pids))
	}
	if n := ReapChildren(); n != 0 {
		t.Errorf("reaped %d children the second time, want 0", n)
	}
}
