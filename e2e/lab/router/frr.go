package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/herald-lb/herald/e2e/lab/proc"
)

// FRRDaemonDir is where Debian installs the FRR daemons.
var FRRDaemonDir = "/usr/lib/frr"

// Paths FRR uses outside any directory it is told about (see
// removeFRRLeftovers).
const (
	frrTmpDir = "/var/tmp/frr"
	frrRunDir = "/var/run/frr"
)

// frrDaemons are started in this order and stopped in reverse: bgpd and
// bfdd register with zebra, and bgpd's BFD sessions reach bfdd through
// zebra, so zebra is needed even though the lab only wants BGP and BFD.
// zebra also installs learned routes in the namespace's kernel table.
// FRR 8.4 has no mgmtd, and staticd only serves `ip route` lines, which
// the lab does not use.
var frrDaemons = []string{"zebra", "bgpd", "bfdd"}

func isFRRDaemon(name string) bool {
	for _, d := range frrDaemons {
		if d == name {
			return true
		}
	}
	return false
}

var pathspaceRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// FRRConfig says where and how to run one FRR instance.
type FRRConfig struct {
	// Netns is the network namespace (from `ip netns add`) to run in.
	Netns string
	// Dir receives every file of the instance: configuration, sockets,
	// PID files and logs. It is created if missing.
	Dir string
	// Name is FRR's pathspace (-N) and prefixes the process names;
	// letters, digits, '-' and '_'. Empty means Netns.
	Name string
	// Config is the integrated frr.conf, e.g. from FRRBGPConfig.
	Config string
	// BGPPort is the TCP port bgpd listens on; 0 means 179.
	BGPPort int
	// KillWithParent has the kernel kill the daemons when the starting
	// thread dies (for tests; off for a lab that outlives its CLI).
	KillWithParent bool
}

// FRR is a running FRR instance.
type FRR struct {
	cfg   FRRConfig
	procs []*proc.Process // in start order
}

// StartFRR starts zebra, bgpd and bfdd in cfg.Netns and loads cfg.Config
// into them.
//
// Every path is given on the command line so that nothing is read from
// or written to /etc/frr or the system FRR's sockets: -f (an empty
// per-daemon file; the configuration is loaded afterwards with `vtysh
// -b`, as FRR's own init script does), --vty_socket, -z (zebra's API
// socket), -i, bfdd's --bfdctl, and -P 0 (no TCP CLI). -N <Name> still
// matters as a fallback for anything not overridden; FRR creates an empty
// /var/run/frr/<Name> for it, which Stop removes.
func StartFRR(ctx context.Context, cfg FRRConfig) (_ *FRR, err error) {
	if cfg.Netns == "" || cfg.Dir == "" {
		return nil, errors.New("frr: Netns and Dir are required")
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Netns
	}
	if !pathspaceRE.MatchString(cfg.Name) {
		return nil, fmt.Errorf("frr: invalid name %q: letters, digits, '-' and '_' only", cfg.Name)
	}
	if cfg.Dir, err = filepath.Abs(cfg.Dir); err != nil {
		return nil, fmt.Errorf("frr %s: %w", cfg.Name, err)
	}
	if err := prepareFRRDir(cfg); err != nil {
		return nil, err
	}
	files := map[string]string{"frr.conf": cfg.Config, "vtysh.conf": ""}
	for _, d := range frrDaemons {
		files[d+".conf"] = ""
	}
	for name, content := range files {
		// 0600: the configuration may hold BGP passwords.
		if err := os.WriteFile(filepath.Join(cfg.Dir, name), []byte(content), 0o600); err != nil {
			return nil, fmt.Errorf("frr %s: %w", cfg.Name, err)
		}
	}

	f := &FRR{cfg: cfg}
	if err := f.start(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// prepareFRRDir checks the binaries, creates cfg.Dir and removes the
// sockets a stopped instance left there.
func prepareFRRDir(cfg FRRConfig) error {
	sockets := []string{"zserv.api", "bfdd.sock"}
	bins := []string{"vtysh"}
	for _, d := range frrDaemons {
		sockets = append(sockets, d+".vty")
		bins = append(bins, filepath.Join(FRRDaemonDir, d))
	}
	if err := prepareDir(cfg.Netns, cfg.Dir, sockets, bins...); err != nil {
		return fmt.Errorf("frr %s: %w", cfg.Name, err)
	}
	return nil
}

// start starts the daemons and loads frr.conf; on failure it stops what
// it started.
func (f *FRR) start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			_ = f.Stop()
		}
	}()
	f.procs = nil
	for _, d := range frrDaemons {
		p, err := startInNetns(ctx, f.cfg.Netns, f.daemon(d), f.cfg.KillWithParent)
		if p != nil {
			f.procs = append(f.procs, p)
		}
		if err != nil {
			return fmt.Errorf("frr: %w", err)
		}
	}
	if _, err := f.vtysh(ctx, "-b"); err != nil {
		return fmt.Errorf("frr %s: load %s: %w", f.cfg.Name, filepath.Join(f.cfg.Dir, "frr.conf"), err)
	}
	return nil
}

// Restart stops every daemon, as a router reboot or an FRR service
// restart does (bgpd's sessions end with a NOTIFICATION; routes learned
// are gone), and starts them again with the configuration FRR started
// with; changes made since through vtysh are lost, as on a real router
// without `write memory`. Records change: save them again.
func (f *FRR) Restart(ctx context.Context) error {
	if err := f.Stop(); err != nil {
		return fmt.Errorf("frr %s: restart: %w", f.cfg.Name, err)
	}
	if err := prepareFRRDir(f.cfg); err != nil {
		return err
	}
	return f.start(ctx)
}

func (f *FRR) daemon(name string) daemon {
	dir := f.cfg.Dir
	args := []string{
		"-N", f.cfg.Name,
		// FRR refuses to run as a user outside its vty group (frrvty),
		// and root is not in it unless named as the group. Running as
		// root means FRR changes no IDs: it only drops capabilities, so
		// the files in Dir stay root's and KillWithParent's parent-death
		// signal survives (a change of effective IDs would clear it).
		"-u", "root", "-g", "frrvty",
		"-P", "0",
		"-f", filepath.Join(dir, name+".conf"),
		"-i", filepath.Join(dir, name+".pid"),
		"--vty_socket", dir,
		"-z", filepath.Join(dir, "zserv.api"),
		"--log", "stdout",
	}
	switch name {
	case "bgpd":
		if f.cfg.BGPPort != 0 {
			args = append(args, "-p", strconv.Itoa(f.cfg.BGPPort))
		}
	case "bfdd":
		args = append(args, "--bfdctl", filepath.Join(dir, "bfdd.sock"))
	}
	return daemon{
		name:  f.cfg.Name + "/" + name,
		path:  filepath.Join(FRRDaemonDir, name),
		args:  args,
		log:   filepath.Join(dir, name+".log"),
		ready: filepath.Join(dir, name+".vty"),
	}
}

// Name is the instance's pathspace.
func (f *FRR) Name() string { return f.cfg.Name }

// Dir is the instance's directory.
func (f *FRR) Dir() string { return f.cfg.Dir }

func (f *FRR) vtysh(ctx context.Context, args ...string) (string, error) {
	base := []string{"--vty_socket", f.cfg.Dir, "--config_dir", f.cfg.Dir}
	return runCLI(ctx, "vtysh", append(base, args...)...)
}

// Vtysh runs vtysh commands (each one a -c, in order, e.g. "configure
// terminal", "router bgp 64512", "neighbor ...") and returns the output.
func (f *FRR) Vtysh(ctx context.Context, cmds ...string) (string, error) {
	if len(cmds) == 0 {
		return "", errors.New("frr: vtysh: no command")
	}
	var args []string
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out, err := f.vtysh(ctx, args...)
	if err != nil {
		return out, fmt.Errorf("frr %s: %w", f.cfg.Name, err)
	}
	return out, nil
}

// VtyshJSON runs one command that prints JSON (e.g. "show bgp summary
// json") and decodes its output into v.
func (f *FRR) VtyshJSON(ctx context.Context, cmd string, v any) error {
	out, err := f.Vtysh(ctx, cmd)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		if len(out) > 500 {
			out = out[:500] + "..."
		}
		return fmt.Errorf("frr %s: %q: %w in %q", f.cfg.Name, cmd, err, out)
	}
	return nil
}

// Records identifies the running daemons, in start order, for a state
// file and StopRecorded.
func (f *FRR) Records() []proc.Record {
	var out []proc.Record
	for _, p := range f.procs {
		out = append(out, p.Record)
	}
	return out
}

// LogFiles are the daemons' logs.
func (f *FRR) LogFiles() []string {
	var out []string
	for _, d := range frrDaemons {
		out = append(out, filepath.Join(f.cfg.Dir, d+".log"))
	}
	return out
}

// WriteLogTails writes the last lines of every daemon's log to w.
func (f *FRR) WriteLogTails(w io.Writer, lines int) { writeTails(w, f.LogFiles(), lines) }

// Stop stops the daemons (bgpd's sessions end with a NOTIFICATION) and
// removes what FRR left outside Dir. Dir itself stays, with the logs.
func (f *FRR) Stop() error {
	var errs []error
	for i := len(f.procs) - 1; i >= 0; i-- {
		if err := f.procs[i].Stop(StopGrace); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, removeFRRLeftovers(f.Records()))
	return errors.Join(errs...)
}
