package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestBuild(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}}
	for _, c := range []struct {
		name     string
		revision string
		settings []debug.BuildSetting
		want     string
	}{
		{"link-time revision wins", "feedface", vcs, "version: v1\nrevision: feedface\ngo: go1.x\n"},
		{"build info", "", vcs, "version: v1\nrevision: 0123456789abcdef (modified)\ngo: go1.x\n"},
		{"nothing recorded", "", nil, "version: v1\nrevision: unknown\ngo: go1.x\n"},
	} {
		if got := build("v1", c.revision, c.settings, "go1.x").Long(); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

func TestGetHasGoVersion(t *testing.T) {
	if g := Get().Go; !strings.HasPrefix(g, "go") || !strings.Contains(g, "/") {
		t.Errorf("Go = %q, want like go1.26.8 linux/amd64", g)
	}
}
