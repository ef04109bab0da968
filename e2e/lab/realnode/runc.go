package realnode

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// ClampOOMScore raises a negative process.oomScoreAdj in an OCI runtime
// spec to 0. kubelet asks for -997 for node-critical pods and Guaranteed
// ones; lowering a score needs CAP_SYS_RESOURCE, which root lacks on the
// lab's machines, so runc would fail to start those pods. 0 is the
// lowest score the machine grants. It reports the value it replaced.
func ClampOOMScore(spec []byte) (out []byte, was int, changed bool, err error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(spec, &doc); err != nil {
		return nil, 0, false, fmt.Errorf("runtime spec: %w", err)
	}
	raw, ok := doc["process"]
	if !ok {
		return spec, 0, false, nil
	}
	var process map[string]json.RawMessage
	if err := json.Unmarshal(raw, &process); err != nil {
		return nil, 0, false, fmt.Errorf("runtime spec: process: %w", err)
	}
	adjRaw, ok := process["oomScoreAdj"]
	if !ok {
		return spec, 0, false, nil
	}
	var adj int
	if err := json.Unmarshal(adjRaw, &adj); err != nil {
		return nil, 0, false, fmt.Errorf("runtime spec: process.oomScoreAdj: %w", err)
	}
	if adj >= 0 {
		return spec, adj, false, nil
	}
	process["oomScoreAdj"] = json.RawMessage("0")
	if doc["process"], err = json.Marshal(process); err != nil {
		return nil, 0, false, err
	}
	out, err = json.Marshal(doc)
	return out, adj, err == nil, err
}

// BundleToClamp is the bundle directory of a runc command line whose
// spec starts a container (create, run), or "" for any other command.
func BundleToClamp(args []string) string {
	command, bundle := "", "."
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--bundle" || a == "-b":
			if i+1 < len(args) {
				bundle = args[i+1]
				i++
			}
		case len(a) > 9 && a[:9] == "--bundle=":
			bundle = a[9:]
		case command == "" && len(a) > 0 && a[0] != '-':
			// Global flags with a value (--root, --log, --log-format,
			// --criu) come before the command; skip their values.
			if i > 0 && takesValue(args[i-1]) {
				continue
			}
			command = a
		}
	}
	if command != "create" && command != "run" {
		return ""
	}
	return bundle
}

func takesValue(flag string) bool {
	switch flag {
	case "--root", "--log", "--log-format", "--criu", "--rootless":
		return true
	}
	return false
}

// ClampBundle rewrites the bundle's config.json when its OOM score is
// negative; it returns the score it replaced (0 when none).
func ClampBundle(bundle string) (int, error) {
	path := filepath.Join(bundle, "config.json")
	spec, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	out, was, changed, err := ClampOOMScore(spec)
	if err != nil || !changed {
		return 0, err
	}
	return was, os.WriteFile(path, out, 0o644)
}
