package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/herald-lb/herald/e2e/lab/proc"
)

// BIRDConfig says where and how to run one BIRD instance.
type BIRDConfig struct {
	// Netns is the network namespace (from `ip netns add`) to run in.
	Netns string
	// Dir receives the instance's files: bird.conf, the control socket
	// bird.ctl, the PID file and bird.log. It is created if missing.
	Dir string
	// Name prefixes the process name; empty means Netns.
	Name string
	// Config is the bird.conf, e.g. from BIRDBGPConfig.
	Config string
	// KillWithParent has the kernel kill bird when the starting thread
	// dies (for tests; off for a lab that outlives its CLI).
	KillWithParent bool
}

// BIRD is a running BIRD instance.
type BIRD struct {
	cfg BIRDConfig
	p   *proc.Process
}

// StartBIRD starts bird in the foreground in cfg.Netns with cfg.Config.
// bird reads its configuration before it opens the control socket, so a
// bad configuration fails here, with bird's message.
func StartBIRD(ctx context.Context, cfg BIRDConfig) (_ *BIRD, err error) {
	if cfg.Netns == "" || cfg.Dir == "" {
		return nil, errors.New("bird: Netns and Dir are required")
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Netns
	}
	if cfg.Dir, err = filepath.Abs(cfg.Dir); err != nil {
		return nil, fmt.Errorf("bird %s: %w", cfg.Name, err)
	}
	if err := prepareDir(cfg.Netns, cfg.Dir, []string{"bird.ctl"}, "bird", "birdc"); err != nil {
		return nil, fmt.Errorf("bird %s: %w", cfg.Name, err)
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, "bird.conf"), []byte(cfg.Config), 0o600); err != nil {
		return nil, fmt.Errorf("bird %s: %w", cfg.Name, err)
	}
	bird, err := exec.LookPath("bird")
	if err != nil {
		return nil, fmt.Errorf("bird %s: %w", cfg.Name, err)
	}
	b := &BIRD{cfg: cfg}
	d := daemon{
		name:  cfg.Name + "/bird",
		path:  bird,
		args:  []string{"-f", "-c", b.configPath(), "-s", b.socket(), "-P", filepath.Join(cfg.Dir, "bird.pid")},
		log:   filepath.Join(cfg.Dir, "bird.log"),
		ready: b.socket(),
	}
	b.p, err = startInNetns(ctx, cfg.Netns, d, cfg.KillWithParent)
	if err != nil {
		return nil, fmt.Errorf("bird: %w", err)
	}
	return b, nil
}

func (b *BIRD) socket() string     { return filepath.Join(b.cfg.Dir, "bird.ctl") }
func (b *BIRD) configPath() string { return filepath.Join(b.cfg.Dir, "bird.conf") }

// Dir is the instance's directory.
func (b *BIRD) Dir() string { return b.cfg.Dir }

// Birdc runs one birdc command, given whole or as words ("show",
// "protocols", "all"), and returns its output without birdc's greeting.
func (b *BIRD) Birdc(ctx context.Context, cmd ...string) (string, error) {
	if len(cmd) == 0 {
		return "", errors.New("bird: birdc: no command")
	}
	out, err := runCLI(ctx, "birdc", append([]string{"-s", b.socket()}, cmd...)...)
	if first, rest, ok := strings.Cut(out, "\n"); ok && strings.HasPrefix(first, "BIRD ") && strings.HasSuffix(first, " ready.") {
		out = rest
	}
	if err != nil {
		return out, fmt.Errorf("bird %s: %w", b.cfg.Name, err)
	}
	return out, nil
}

// Reconfigure has bird apply a new configuration (`birdc configure`),
// which restarts only the protocols whose configuration changed. The new
// text replaces bird.conf only when bird accepts it, so a rejected one
// leaves bird and the file as they were.
func (b *BIRD) Reconfigure(ctx context.Context, config string) error {
	next := b.configPath() + ".next"
	if err := os.WriteFile(next, []byte(config), 0o600); err != nil {
		return fmt.Errorf("bird %s: %w", b.cfg.Name, err)
	}
	defer os.Remove(next)
	out, err := b.Birdc(ctx, "configure", strconv.Quote(next))
	if err == nil && !strings.Contains(out, "Reconfigured") && !strings.Contains(out, "Reconfiguration in progress") {
		err = fmt.Errorf("bird %s: configure: %s", b.cfg.Name, strings.TrimSpace(out))
	}
	if err != nil {
		return err
	}
	return os.Rename(next, b.configPath())
}

// Records identifies the running daemon for a state file and
// StopRecorded.
func (b *BIRD) Records() []proc.Record { return []proc.Record{b.p.Record} }

// LogFiles are bird's logs.
func (b *BIRD) LogFiles() []string { return []string{filepath.Join(b.cfg.Dir, "bird.log")} }

// WriteLogTails writes the last lines of bird's log to w.
func (b *BIRD) WriteLogTails(w io.Writer, lines int) { writeTails(w, b.LogFiles(), lines) }

// Stop stops bird, which removes its socket and PID file. Dir stays.
func (b *BIRD) Stop() error { return b.p.Stop(StopGrace) }
