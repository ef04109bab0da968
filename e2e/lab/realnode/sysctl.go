package realnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// KubeletSysctls are the kernel tunables kubelet insists on (its
// setupKernelTunables in pkg/kubelet/cm): machine-wide settings, not a
// network namespace's. The lab sets them before the first real kubelet
// starts, records what they were, and puts those back on down; kubelet
// runs with protectKernelDefaults and only checks them.
var KubeletSysctls = map[string]int{
	"vm/overcommit_memory":      1,
	"vm/panic_on_oom":           0,
	"kernel/panic":              10,
	"kernel/panic_on_oops":      1,
	"kernel/keys/root_maxkeys":  1000000,
	"kernel/keys/root_maxbytes": 25000000,
}

// SysctlDir is where the kernel's tunables are read and written.
const SysctlDir = "/proc/sys"

// SetSysctls gives each tunable under root (SysctlDir) its value and
// returns the values the machine had, for RestoreSysctls (only those it
// changed).
func SetSysctls(root string, want map[string]int) (map[string]string, error) {
	saved := map[string]string{}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		path := filepath.Join(root, k)
		cur, err := os.ReadFile(path)
		if err != nil {
			return saved, fmt.Errorf("sysctl %s: %w", strings.ReplaceAll(k, "/", "."), err)
		}
		v := strings.TrimSpace(string(cur))
		if v == strconv.Itoa(want[k]) {
			continue
		}
		if err := os.WriteFile(path, []byte(strconv.Itoa(want[k])), 0o644); err != nil {
			return saved, fmt.Errorf("sysctl %s=%d: %w", strings.ReplaceAll(k, "/", "."), want[k], err)
		}
		saved[k] = v
	}
	return saved, nil
}

// RestoreSysctls writes back what SetSysctls replaced.
func RestoreSysctls(root string, saved map[string]string) error {
	var errs []error
	for k, v := range saved {
		if err := os.WriteFile(filepath.Join(root, k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", strings.ReplaceAll(k, "/", "."), v, err))
		}
	}
	return errors.Join(errs...)
}
