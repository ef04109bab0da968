package k8sbin

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseRelease(t *testing.T) {
	for _, tc := range []struct {
		in           string
		minor, patch int
		ok           bool
	}{
		{"v1.31.14", 31, 14, true},
		{"v1.37.2", 37, 2, true},
		{"v1.34.0", 34, 0, true},
		{"1.34.10", 0, 0, false},
		{"v1.34", 0, 0, false},
		{"v1.35.0-rc.1", 0, 0, false},
		{"v2.0.0", 0, 0, false},
		{"v1.034.1", 0, 0, false},
		{"", 0, 0, false},
	} {
		minor, patch, err := ParseRelease(tc.in)
		if (err == nil) != tc.ok || minor != tc.minor || patch != tc.patch {
			t.Errorf("ParseRelease(%q) = %d, %d, %v", tc.in, minor, patch, err)
		}
	}
	if v, err := StagingVersion("v1.31.14"); err != nil || v != "v0.31.14" {
		t.Errorf("StagingVersion(v1.31.14) = %q, %v", v, err)
	}
}

func TestReleaseTags(t *testing.T) {
	for v, want := range map[string][]string{
		"v1.31.14": {"k8s_pre_1_34"},
		"v1.33.13": {"k8s_pre_1_34"},
		"v1.34.0":  nil,
		"v1.37.2":  nil,
	} {
		if got, err := ReleaseTags(v); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ReleaseTags(%s) = %q, %v; want %q", v, got, err, want)
		}
	}
}

// A release's go.mod, shortened: its staging modules replaced by local
// paths, in a block and on a line of their own, with comments.
const releaseGoMod = `// This is a generated file. Do not edit directly.

module k8s.io/kubernetes

go 1.22.0

godebug default=go1.22

require (
	k8s.io/api v0.0.0
	k8s.io/client-go v0.0.0
	k8s.io/utils v0.0.0-20240711033017-18e509b52bc8
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go // the client
	github.com/example/forked v1.0.0 => github.com/example/fork v1.0.1
)

replace k8s.io/kubectl => ./staging/src/k8s.io/kubectl
`

func TestRenderGoMod(t *testing.T) {
	got, err := RenderGoMod("v1.31.14", []byte(releaseGoMod), map[string]string{"k8s.io/kubectl": "v0.31.11"})
	if err != nil {
		t.Fatal(err)
	}
	want := `// The lab's multi-call Kubernetes binary from kubernetes v1.31.14 (herald e2e/lab/k8sbin; throwaway).
module herald-lab.invalid/k8s-release

go 1.22.0

require k8s.io/kubernetes v1.31.14

replace (
	github.com/example/forked => github.com/example/fork v1.0.1
	k8s.io/api => k8s.io/api v0.31.14
	k8s.io/client-go => k8s.io/client-go v0.31.14
	k8s.io/kubectl => k8s.io/kubectl v0.31.11
)
`
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestRenderGoModRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ version, gomod, msg string }{
		"a pre-release": {"v1.35.0-alpha.1", releaseGoMod, "want a release"},
		"no go line":    {"v1.31.14", "module k8s.io/kubernetes\nreplace k8s.io/api => ./staging/src/k8s.io/api\n", "no go line"},
		"no staging":    {"v1.31.14", "module k8s.io/kubernetes\ngo 1.22.0\n", "replaces no staging module"},
		"another local path": {"v1.31.14", "module k8s.io/kubernetes\ngo 1.22.0\nreplace k8s.io/api => ../api\n",
			"local path ../api"},
		"a garbled replacement": {"v1.31.14", "module k8s.io/kubernetes\ngo 1.22.0\nreplace (\n\tk8s.io/api ./x\n)\n",
			"line 4: cannot read"},
	} {
		_, err := RenderGoMod(tc.version, []byte(tc.gomod), nil)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.msg)
		}
	}
}

func TestReleaseBuildArgs(t *testing.T) {
	date := time.Unix(0, 0)
	old, err := ReleaseBuildArgs("v1.31.14", date, "out")
	if err != nil {
		t.Fatal(err)
	}
	if old[0] != "build" || old[1] != "-tags" || old[2] != "k8s_pre_1_34" || !reflect.DeepEqual(old[3:], BuildArgs("v1.31.14", date, "out")[1:]) {
		t.Errorf("v1.31.14: %q", old)
	}
	// A release needing no tags is built as the pin is.
	cur, err := ReleaseBuildArgs("v1.37.2", date, "out")
	if err != nil || !reflect.DeepEqual(cur, BuildArgs("v1.37.2", date, "out")) {
		t.Errorf("v1.37.2: %q, %v", cur, err)
	}
}

func TestStagingModules(t *testing.T) {
	want := []string{"k8s.io/api", "k8s.io/client-go", "k8s.io/kubectl"}
	if got := StagingModules([]byte(releaseGoMod)); !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestSubstituteCandidates(t *testing.T) {
	served := []string{"v0.30.14", "v0.31.5", "v0.31.11", "v0.31.8", "v0.31.14", "v0.31.15", "v0.31.9-rc.0", "v0.32.1"}
	want := []string{"v0.31.11", "v0.31.8", "v0.31.5", "v0.31.15"}
	if got := SubstituteCandidates("v0.31.14", served); !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := SubstituteCandidates("v0.33.1", served); got != nil {
		t.Errorf("another minor: got %q", got)
	}
}
