// Package router runs the lab's BGP routers — FRR (zebra, bgpd, bfdd) and
// BIRD 2 as a second, independent implementation — inside a network
// namespace, each instance with all its files in a directory the lab owns,
// so that it never touches a system-wide FRR or BIRD.
//
// Daemons run in the foreground under proc, started as `ip netns exec
// <netns> <daemon>` (ip execs the daemon in place, so the recorded PID is
// the daemon's). Their proc.Records are what a lab state file keeps;
// StopRecorded stops them after the starting process crashed.
package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/herald-lb/herald/e2e/lab/netns"
	"github.com/herald-lb/herald/e2e/lab/proc"
)

// StopGrace is how long a daemon gets between SIGTERM and SIGKILL.
// Routers exit within milliseconds; a stuck one is not worth waiting for.
const StopGrace = 5 * time.Second

// startTimeout bounds how long a daemon may take to open its control
// socket when the caller's context has no deadline.
const startTimeout = 30 * time.Second

// maxSocketPath is the longest path a unix socket can bind to (sun_path
// holds 108 bytes including the terminating NUL).
const maxSocketPath = 107

// daemon is one process to start in a namespace.
type daemon struct {
	name string // record name, e.g. "hlab-router/bgpd"
	path string
	args []string
	log  string
	// ready is the socket the daemon creates once it serves its CLI.
	ready string
}

// startInNetns starts d in the named namespace and waits until its ready
// socket exists. On failure the process is stopped, the error carries the
// tail of its log, and the process is still returned (when it was
// started) so that the caller can clean up after it.
func startInNetns(ctx context.Context, ns string, d daemon, killWithParent bool) (*proc.Process, error) {
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", d.name, err)
	}
	p, err := proc.Start(proc.Spec{
		Name:           d.name,
		Path:           ip,
		Args:           append([]string{"netns", "exec", ns, d.path}, d.args...),
		LogPath:        d.log,
		KillWithParent: killWithParent,
	})
	if err != nil {
		return nil, err
	}
	if err := waitSocket(ctx, p, d.ready); err != nil {
		_ = p.Stop(StopGrace)
		var tail strings.Builder
		proc.WriteTail(&tail, d.log, 30)
		return p, fmt.Errorf("start %s in netns %s: %w\n%s", d.name, ns, err, tail.String())
	}
	return p, nil
}

// waitSocket waits until path is a socket, failing early when p exits.
func waitSocket(ctx context.Context, p *proc.Process, path string) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startTimeout)
		defer cancel()
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if st, err := os.Stat(path); err == nil && st.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("exited before creating %s (%v)", path, p.Err())
		case <-ctx.Done():
			return fmt.Errorf("no %s yet: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}

// prepareDir checks what every router needs before anything starts: the
// namespace, the binaries and a directory short enough for sockets.
func prepareDir(ns, dir string, socketNames []string, binaries ...string) error {
	if _, err := os.Stat(filepath.Join(netns.Dir, ns)); err != nil {
		return fmt.Errorf("netns %s: %w", ns, err)
	}
	for _, bin := range binaries {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s is not installed (`make test` installs frr and bird2): %w", bin, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, s := range socketNames {
		p := filepath.Join(dir, s)
		if len(p) > maxSocketPath {
			return fmt.Errorf("socket path %s is longer than %d bytes: use a shorter dir", p, maxSocketPath)
		}
		// A socket left by a killed daemon would look like a ready one.
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// runCLI runs a daemon's command-line client and returns its stdout; an
// error carries both output streams.
func runCLI(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func writeTails(w io.Writer, logs []string, lines int) {
	for _, l := range logs {
		proc.WriteTail(w, l, lines)
	}
}

// StopRecorded stops recorded router daemons (FRR's or BIRD's, as
// returned by Records) that need not be children of this process, last
// started first, and removes the few files FRR keeps outside the
// instance's directory. grace 0 means StopGrace.
func StopRecorded(records []proc.Record, grace time.Duration) error {
	if grace <= 0 {
		grace = StopGrace
	}
	var errs []error
	for i := len(records) - 1; i >= 0; i-- {
		if err := records[i].Stop(grace); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, removeFRRLeftovers(records))
	return errors.Join(errs...)
}

// frrDaemonOf tells which FRR daemon a record runs and with which
// pathspace, from the arguments it was started with
// (ip netns exec <ns> <daemon> -N <pathspace> ...).
func frrDaemonOf(r proc.Record) (daemon, pathspace string, ok bool) {
	if len(r.Args) < 6 || r.Args[0] != "netns" || r.Args[1] != "exec" {
		return "", "", false
	}
	daemon = filepath.Base(r.Args[3])
	if filepath.Dir(r.Args[3]) != FRRDaemonDir || !isFRRDaemon(daemon) {
		return "", "", false
	}
	for i := 4; i+1 < len(r.Args); i++ {
		if r.Args[i] == "-N" {
			return daemon, r.Args[i+1], true
		}
	}
	return "", "", false
}

// removeFRRLeftovers removes what FRR daemons create outside the lab's
// directory whatever the options: each daemon's crash-log buffer
// directory /var/tmp/frr/<daemon>.<pid> (removed by the daemon itself only
// on a clean exit) and, with -N, the empty /var/run/frr/<pathspace>.
// /var/tmp/frr itself goes when empty: FRR recreates it when it needs it.
func removeFRRLeftovers(records []proc.Record) error {
	var errs []error
	spaces := map[string]bool{}
	sawFRR := false
	for _, r := range records {
		d, ps, ok := frrDaemonOf(r)
		if !ok || r.PID <= 0 {
			continue
		}
		sawFRR = true
		spaces[ps] = true
		if r.Alive() {
			continue // failed to stop; reported by the caller
		}
		// A new process with the same PID and program would own the
		// directory now.
		if comm, err := os.ReadFile("/proc/" + strconv.Itoa(r.PID) + "/comm"); err == nil && strings.TrimSpace(string(comm)) == d {
			continue
		}
		if err := os.RemoveAll(filepath.Join(frrTmpDir, d+"."+strconv.Itoa(r.PID))); err != nil {
			errs = append(errs, err)
		}
	}
	for ps := range spaces {
		if err := os.Remove(filepath.Join(frrRunDir, ps)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove FRR pathspace directory: %w", err))
		}
	}
	if sawFRR {
		_ = os.Remove(frrTmpDir) // fails while anything (a system FRR) uses it
	}
	return errors.Join(errs...)
}
