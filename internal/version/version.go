// Package version reports what a herald binary was built from. Builds set
// it at link time:
//
//	-ldflags "-X github.com/herald-lb/herald/internal/version.Version=v0.1.0
//	          -X github.com/herald-lb/herald/internal/version.Revision=<git sha>"
//
// The revision has to come in that way where there is no .git to read (an
// image build) or VCS stamping is off (-buildvcs=false); otherwise the
// one the Go toolchain recorded is used.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is overridden at link time for releases.
var Version = "dev"

// Revision is the git commit, set at link time; empty means "ask the
// build info".
var Revision = ""

// Info is what `herald version` prints.
type Info struct {
	Version  string
	Revision string // "unknown" when nobody recorded it
	Modified bool   // built from a tree with uncommitted changes (build info only)
	Go       string // toolchain and platform: "go1.26.8 linux/amd64"
}

// Get collects the Info of this binary.
func Get() Info {
	var settings []debug.BuildSetting
	if bi, ok := debug.ReadBuildInfo(); ok {
		settings = bi.Settings
	}
	return build(Version, Revision, settings, runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH)
}

// build prefers the link-time revision over the recorded one: an image
// build knows its commit only from the build argument.
func build(version, revision string, settings []debug.BuildSetting, goVersion string) Info {
	i := Info{Version: version, Revision: revision, Go: goVersion}
	if i.Revision == "" {
		for _, s := range settings {
			switch s.Key {
			case "vcs.revision":
				i.Revision = s.Value
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
	}
	if i.Revision == "" {
		i.Revision = "unknown"
	}
	return i
}

// Long is the text of `herald version`: one "key: value" line each.
func (i Info) Long() string {
	rev := i.Revision
	if i.Modified {
		rev += " (modified)"
	}
	return fmt.Sprintf("version: %s\nrevision: %s\ngo: %s\n", i.Version, rev, i.Go)
}

// String is the short form the components log at start-up: the version
// and, when known, the first 12 characters of the revision.
func String() string {
	i := Get()
	if i.Revision == "unknown" {
		return i.Version
	}
	r := i.Revision
	if len(r) > 12 {
		r = r[:12]
	}
	return i.Version + " (" + r + ")"
}
