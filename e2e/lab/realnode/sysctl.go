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

// SysctlsToChange reads the tunables under root (SysctlDir) and returns
// the current values of those that differ from want: what SetSysctls
// will replace and RestoreSysctls put back. The lab records them before
// changing anything.
func SysctlsToChange(root string, want map[string]int) (map[string]string, error) {
	old := map[string]string{}
	for _, k := range sortedKeys(want) {
		cur, err := os.ReadFile(filepath.Join(root, k))
		if err != nil {
			return nil, fmt.Errorf("sysctl %s: %w", strings.ReplaceAll(k, "/", "."), err)
		}
		if v := strings.TrimSpace(string(cur)); v != strconv.Itoa(want[k]) {
			old[k] = v
		}
	}
	return old, nil
}

// SetSysctls gives each tunable under root its value.
func SetSysctls(root string, want map[string]int) error {
	for _, k := range sortedKeys(want) {
		if err := os.WriteFile(filepath.Join(root, k), []byte(strconv.Itoa(want[k])), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%d: %w", strings.ReplaceAll(k, "/", "."), want[k], err)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
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
