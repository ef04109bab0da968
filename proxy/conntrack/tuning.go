package conntrack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Tuning is the kernel's conntrack settings the proxy writes at start,
// kube-proxy's --conntrack-* flags with its defaults: a node moved from
// kube-proxy to herald keeps the table size and the timeouts it had.
// A zero leaves that setting as the node has it.
type Tuning struct {
	// MaxPerCore and Min size the table: nf_conntrack_max becomes
	// MaxPerCore times the CPUs, at least Min. MaxPerCore 0 leaves the
	// size alone (Min is then ignored, as with kube-proxy).
	MaxPerCore, Min int
	// TCPEstablishedTimeout and TCPCloseWaitTimeout are how long an idle
	// established connection, and one the server has closed and the
	// client not yet, stay tracked.
	TCPEstablishedTimeout, TCPCloseWaitTimeout time.Duration
	// TCPBeLiberal accepts out-of-window TCP packets instead of marking
	// them INVALID; false leaves the node's setting.
	TCPBeLiberal bool
	// UDPTimeout and UDPStreamTimeout are the unreplied and the
	// assured UDP timeouts.
	UDPTimeout, UDPStreamTimeout time.Duration
}

// DefaultTuning is kube-proxy v1.34's defaults.
func DefaultTuning() Tuning {
	return Tuning{
		MaxPerCore:            32 * 1024,
		Min:                   128 * 1024,
		TCPEstablishedTimeout: 24 * time.Hour,
		TCPCloseWaitTimeout:   time.Hour,
	}
}

// The settings' paths, relative to the root of /proc and /sys.
const (
	SysctlMax                   = "proc/sys/net/netfilter/nf_conntrack_max"
	SysctlTCPEstablishedTimeout = "proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established"
	SysctlTCPCloseWaitTimeout   = "proc/sys/net/netfilter/nf_conntrack_tcp_timeout_close_wait"
	SysctlTCPBeLiberal          = "proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal"
	SysctlUDPTimeout            = "proc/sys/net/netfilter/nf_conntrack_udp_timeout"
	SysctlUDPStreamTimeout      = "proc/sys/net/netfilter/nf_conntrack_udp_timeout_stream"
	// HashSize is the table's bucket count, a module parameter: the
	// kernel wants at least a quarter of the table's size in buckets.
	HashSize = "sys/module/nf_conntrack/parameters/hashsize"
)

// Validate names the flag of a setting that cannot be written.
func (t Tuning) Validate() error {
	var errs []error
	for _, c := range []struct {
		flag string
		n    int
	}{{"conntrack-max-per-core", t.MaxPerCore}, {"conntrack-min", t.Min}} {
		if c.n < 0 {
			errs = append(errs, fmt.Errorf("--%s: must not be negative, got %d", c.flag, c.n))
		}
	}
	for _, c := range []struct {
		flag string
		d    time.Duration
	}{
		{"conntrack-tcp-timeout-established", t.TCPEstablishedTimeout},
		{"conntrack-tcp-timeout-close-wait", t.TCPCloseWaitTimeout},
		{"conntrack-udp-timeout", t.UDPTimeout},
		{"conntrack-udp-timeout-stream", t.UDPStreamTimeout},
	} {
		switch {
		case c.d < 0:
			errs = append(errs, fmt.Errorf("--%s: must not be negative, got %s", c.flag, c.d))
		case c.d > 0 && c.d < time.Second:
			errs = append(errs, fmt.Errorf("--%s: the kernel counts whole seconds, got %s", c.flag, c.d))
		}
	}
	return errors.Join(errs...)
}

// Setting is one value to write.
type Setting struct {
	Path  string
	Value int
}

// Plan is the settings t asks for on a node with cpus CPUs, in the
// order kube-proxy writes them. The hash size is not among them: it
// follows the table's size (Apply).
func (t Tuning) Plan(cpus int) []Setting {
	var out []Setting
	if t.MaxPerCore > 0 {
		out = append(out, Setting{SysctlMax, max(t.MaxPerCore*max(cpus, 1), t.Min)})
	}
	add := func(path string, d time.Duration) {
		if d > 0 {
			out = append(out, Setting{path, int(d / time.Second)})
		}
	}
	add(SysctlTCPEstablishedTimeout, t.TCPEstablishedTimeout)
	add(SysctlTCPCloseWaitTimeout, t.TCPCloseWaitTimeout)
	if t.TCPBeLiberal {
		out = append(out, Setting{SysctlTCPBeLiberal, 1})
	}
	add(SysctlUDPTimeout, t.UDPTimeout)
	add(SysctlUDPStreamTimeout, t.UDPStreamTimeout)
	return out
}

// Sysctls reads and writes integer kernel settings by path.
type Sysctls interface {
	Read(path string) (int, error)
	Write(path string, value int) error
}

// Outcome is what Apply did with one setting.
type Outcome struct {
	Setting
	// Was is the value before (meaningful when Err is nil or the write
	// failed).
	Was int
	// Changed: the value was written; false with a nil Err: it was
	// already right.
	Changed bool
	Err     error
}

// Apply writes the plan, each setting only when it differs, and the
// hash size when the table's size needs more buckets than it has. A
// setting that cannot be read or written is reported and the others are
// still tried: the proxy works with the kernel's defaults, so a
// read-only /proc/sys (a container's) or a setting only the host's
// network namespace may change (nf_conntrack_max, the hash size) is a
// warning, never a reason not to start.
func Apply(t Tuning, cpus int, s Sysctls) []Outcome {
	var out []Outcome
	for _, set := range t.Plan(cpus) {
		o := write(s, set)
		out = append(out, o)
		if set.Path == SysctlMax && o.Err == nil {
			if h, err := s.Read(HashSize); err != nil || h < set.Value/4 {
				out = append(out, write(s, Setting{HashSize, set.Value / 4}))
			}
		}
	}
	return out
}

func write(s Sysctls, set Setting) Outcome {
	o := Outcome{Setting: set}
	if o.Was, o.Err = s.Read(set.Path); o.Err != nil || o.Was == set.Value {
		return o
	}
	if o.Err = s.Write(set.Path, set.Value); o.Err == nil {
		o.Changed = true
	}
	return o
}

// Files is Sysctls on the files under Root ("/" when empty): /proc/sys
// of the network namespace the process runs in.
type Files struct{ Root string }

func (f Files) path(p string) string {
	if f.Root == "" {
		return "/" + p
	}
	return filepath.Join(f.Root, p)
}

// Read reads the setting's integer.
func (f Files) Read(p string) (int, error) {
	b, err := os.ReadFile(f.path(p))
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", f.path(p), strings.TrimSpace(string(b)))
	}
	return n, nil
}

// Write writes it.
func (f Files) Write(p string, v int) error {
	// Never created: a setting the kernel lacks is an error.
	file, err := os.OpenFile(f.path(p), os.O_WRONLY|os.O_TRUNC, 0)
	if err == nil {
		_, err = file.WriteString(strconv.Itoa(v))
		if cerr := file.Close(); err == nil {
			err = cerr
		}
	}
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w (a read-only /proc/sys or /sys, or a setting only the host's network namespace may change)", err)
	}
	return err
}

// FakeSysctls is Sysctls in memory; a path in ReadOnly refuses writes,
// one missing from Values cannot be read.
type FakeSysctls struct {
	Values   map[string]int
	ReadOnly map[string]bool
	Writes   []Setting
}

// Read returns the value.
func (f *FakeSysctls) Read(p string) (int, error) {
	v, ok := f.Values[p]
	if !ok {
		return 0, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	}
	return v, nil
}

// Write records the value unless p is read-only.
func (f *FakeSysctls) Write(p string, v int) error {
	if f.ReadOnly[p] {
		return fmt.Errorf("%s: %w", p, fs.ErrPermission)
	}
	if f.Values == nil {
		f.Values = map[string]int{}
	}
	f.Values[p] = v
	f.Writes = append(f.Writes, Setting{p, v})
	return nil
}
