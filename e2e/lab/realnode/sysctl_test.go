package realnode

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSysctlsSetAndRestore(t *testing.T) {
	dir := t.TempDir()
	for k, v := range map[string]string{"vm/overcommit_memory": "0\n", "kernel/panic": "10\n"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(k)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int{"vm/overcommit_memory": 1, "kernel/panic": 10}
	saved, err := SysctlsToChange(dir, want)
	if err != nil {
		t.Fatal(err)
	}
	if err := SetSysctls(dir, want); err != nil {
		t.Fatal(err)
	}
	if len(saved) != 1 || saved["vm/overcommit_memory"] != "0" {
		t.Errorf("saved %v: want only the value that changed", saved)
	}
	if v, _ := os.ReadFile(filepath.Join(dir, "vm/overcommit_memory")); string(v) != "1" {
		t.Errorf("overcommit_memory = %q", v)
	}
	if err := RestoreSysctls(dir, saved); err != nil {
		t.Fatal(err)
	}
	if v, _ := os.ReadFile(filepath.Join(dir, "vm/overcommit_memory")); string(v) != "0" {
		t.Errorf("restored overcommit_memory = %q", v)
	}
	if _, err := SysctlsToChange(dir, map[string]int{"no/such": 1}); err == nil {
		t.Error("a missing tunable: no error")
	}
}
