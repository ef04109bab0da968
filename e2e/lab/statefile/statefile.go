// Package statefile keeps the small JSON records lab components write so a
// later `down` can clean up after a crash (PIDs, namespaces, paths).
package statefile

import (
	"encoding/json"
	"fmt"
	"os"
)

// Write stores v as indented JSON at path through a temporary file and a
// rename, so a crash never leaves half a state file behind.
func Write(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Read decodes the state file at path. A missing file returns the
// os.ReadFile error unchanged, so callers can test errors.Is(err,
// fs.ErrNotExist); a corrupt one names the file.
func Read[T any](path string) (T, error) {
	var v T
	data, err := os.ReadFile(path)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
