package statefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRoundTripAndErrors(t *testing.T) {
	type rec struct {
		PIDs []int  `json:"pids"`
		Dir  string `json:"dir"`
	}
	path := filepath.Join(t.TempDir(), "state.json")
	if _, err := Read[rec](path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v, want ErrNotExist", err)
	}
	want := rec{PIDs: []int{1, 2}, Dir: "/x"}
	if err := Write(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := Read[rec](path)
	if err != nil || got.Dir != want.Dir || len(got.PIDs) != 2 {
		t.Fatalf("read back %+v, %v", got, err)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary file left behind: %v", err)
	}
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read[rec](path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("corrupt file: %v, want an error naming %s", err, path)
	}
}
