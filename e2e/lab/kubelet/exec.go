package kubelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// execTarget is where a command for a running container runs.
//
// In binary mode the container is a host program in the pod's network
// namespace and its own mount namespace (/sys remounted, volumes bound):
// the command enters both namespaces of the program's process with
// nsenter and gets the program's environment, so it sees what the
// program sees; it runs as root with all capabilities, on the host's
// filesystem, as `herald-lab exec pod/...` does. In image mode it runs
// inside the container with `runc exec`: the container's root
// filesystem, namespaces, user, capabilities and environment.
type execTarget struct {
	// pid is the container's first process.
	pid int
	// runcRoot and runcID name an image-mode container.
	runcRoot, runcID string
	// dir is the working directory in binary mode (the pod's directory,
	// the program's own).
	dir string
}

// command is the command line that runs cmd at the target.
func (t execTarget) command(cmd []string, tty bool) []string {
	if t.runcID != "" {
		args := []string{"runc", "--root", t.runcRoot, "exec"}
		if tty {
			args = append(args, "--tty")
		}
		return append(append(args, t.runcID), cmd...)
	}
	return append([]string{"nsenter", "--target", strconv.Itoa(t.pid), "--mount", "--net", "--"}, cmd...)
}

// waitEntered waits, in binary mode, until the container's process is no
// longer `ip netns exec`, which starts it: until then the process may not
// have entered the pod's network namespace or made its mount namespace.
// A program is Running as soon as ip runs, so an exec can come that
// early.
func (t execTarget) waitEntered(ctx context.Context) error {
	if t.runcID != "" {
		return nil
	}
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		return err
	}
	if p, err := filepath.EvalSymlinks(ipPath); err == nil {
		ipPath = p
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		exe, err := os.Readlink("/proc/" + strconv.Itoa(t.pid) + "/exe")
		if err != nil {
			return fmt.Errorf("the container's process %d: %w", t.pid, err)
		}
		if exe != ipPath {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the container's process %d is still entering its namespaces after 5s", t.pid)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// env is the environment an exec'd command starts with: in binary mode
// the program's (which has a PATH, see containerEnv); nil, the
// kubelet's, for runc, which gives the command the container's.
func (t execTarget) env() ([]string, error) {
	if t.runcID != "" {
		return nil, nil
	}
	// Read empty while the process is in the middle of an execve (sh
	// exec'ing its program): the kernel switches the process to the new
	// program before it lays out the new environment. Every program the
	// lab starts has one (PATH at least), so empty means "not yet".
	for deadline := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(t.pid) + "/environ")
		if err != nil {
			return nil, fmt.Errorf("reading the container's environment: %w", err)
		}
		if len(data) > 0 || time.Now().After(deadline) {
			return splitEnviron(data), nil
		}
	}
}

// splitEnviron splits /proc/<pid>/environ (NUL-terminated entries).
func splitEnviron(data []byte) []string {
	var out []string
	for _, kv := range bytes.Split(data, []byte{0}) {
		if len(kv) > 0 {
			out = append(out, string(kv))
		}
	}
	return out
}

// run runs cmd at the target with the given streams (any may be nil),
// in a terminal when tty is set, and returns once it has exited and its
// output is written. A non-zero exit is a utilexec.ExitError, which the
// streaming server reports to the client as the command's exit code.
func (t execTarget) run(ctx context.Context, cmd []string, in io.Reader, out, errOut io.Writer, tty bool, resize <-chan remotecommand.TerminalSize) error {
	if len(cmd) == 0 {
		return errors.New("no command")
	}
	if err := t.waitEntered(ctx); err != nil {
		return err
	}
	argv := t.command(cmd, tty)
	env, err := t.env()
	if err != nil {
		return err
	}
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Env, c.Dir = env, t.dir
	c.WaitDelay = 2 * time.Second // after a cancel, do not wait on output forever
	if tty {
		err = runInTerminal(c, in, out, resize)
	} else {
		err = runWithPipes(c, in, out, errOut)
	}
	return exitCodeError(err)
}

// exitCodeError turns a command's non-zero exit into the
// utilexec.ExitError the streaming server passes on as an exit code
// (128+N for a command killed by signal N, as a shell says).
func exitCodeError(err error) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	code := ee.ExitCode()
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return utilexec.CodeExitError{Err: err, Code: code}
}

// runWithPipes runs c with plain streams. Stdin is copied by its own
// goroutine so that a client that never closes it does not hold up Wait
// once the command has exited.
func runWithPipes(c *exec.Cmd, in io.Reader, out, errOut io.Writer) error {
	c.Stdout, c.Stderr = out, errOut
	var stdin io.WriteCloser
	if in != nil {
		var err error
		if stdin, err = c.StdinPipe(); err != nil {
			return err
		}
	}
	if err := c.Start(); err != nil {
		return err
	}
	if stdin != nil {
		go func() {
			_, _ = io.Copy(stdin, in)
			stdin.Close()
		}()
	}
	return c.Wait()
}

// runInTerminal runs c on a new pseudo-terminal as its controlling
// terminal (stdout and stderr both go to out, as on a real terminal) and
// applies the client's window size changes to it.
func runInTerminal(c *exec.Cmd, in io.Reader, out io.Writer, resize <-chan remotecommand.TerminalSize) error {
	master, slave, err := openPTY()
	if err != nil {
		return err
	}
	defer master.Close()
	c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = c.Start()
	slave.Close() // the command holds it now
	if err != nil {
		return err
	}
	if resize != nil {
		go func() {
			for size := range resize {
				_ = setWindowSize(master, size.Width, size.Height)
			}
		}()
	}
	if in != nil {
		go func() { _, _ = io.Copy(master, in) }()
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		if out == nil {
			out = io.Discard
		}
		// Ends with EIO once every holder of the terminal has closed it.
		_, _ = io.Copy(out, master)
	}()
	err = c.Wait()
	select {
	case <-copied:
	case <-time.After(2 * time.Second): // a background child still holds it
	}
	return err
}
