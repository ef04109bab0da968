// Package version reports the build's version, set at link time with
// -ldflags "-X github.com/herald-lb/herald/internal/version.Version=...".
package version

import "runtime/debug"

// Version is overridden at link time for releases.
var Version = "dev"

// String returns the version and, when the Go toolchain recorded it, the
// VCS revision of the build.
func String() string {
	v := Version
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
	}
	return v
}
