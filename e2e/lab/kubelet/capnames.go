package kubelet

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// capNames are Linux's capabilities by number (linux/capability.h).
var capNames = []string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
	"IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
	"SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
	"LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
	"WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
}

// capsOfMask names the capabilities set in a /proc/<pid>/status mask.
func capsOfMask(mask uint64) []string {
	var out []string
	for i, n := range capNames {
		if mask&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// capMask is the /proc/<pid>/status mask of the named capabilities.
func capMask(caps []string) (uint64, error) {
	var m uint64
	for _, c := range caps {
		i := slices.Index(capNames, c)
		if i < 0 {
			return 0, fmt.Errorf("unknown capability %q", c)
		}
		m |= 1 << i
	}
	return m, nil
}

// statusCaps reads a capability mask (CapEff, CapBnd, ...) of a process.
func statusCaps(pid int, field string) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// boundingCaps are the capabilities this process may hand to a container:
// on our machines root lacks SYS_RESOURCE, and runc fails a container
// asking for a capability outside its own bounding set.
func boundingCaps() ([]string, error) {
	m, err := statusCaps(os.Getpid(), "CapBnd")
	if err != nil {
		return nil, err
	}
	return capsOfMask(m), nil
}
