package e2eimages

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	imageutils "k8s.io/kubernetes/test/utils/image"
)

func TestFrameworkRefs(t *testing.T) {
	refs := FrameworkRefs()
	// What the pinned framework (v1.34) asks for; the references come
	// from imageutils, this only shows they are the ones meant.
	for name, prefix := range map[string]string{
		Agnhost:              "registry.k8s.io/e2e-test-images/agnhost:",
		Pause:                "registry.k8s.io/pause:",
		BusyBox:              "registry.k8s.io/e2e-test-images/busybox:",
		Nginx:                "registry.k8s.io/e2e-test-images/nginx:",
		RegressionIssue74839: "registry.k8s.io/e2e-test-images/regression-issue-74839:",
		DistrolessIptables:   "registry.k8s.io/build-image/distroless-iptables:",
		JessieDnsutils:       "registry.k8s.io/e2e-test-images/jessie-dnsutils:",
	} {
		if !strings.HasPrefix(refs[name], prefix) || tag(refs[name]) == "" {
			t.Errorf("%s: %q, want %s<tag>", name, refs[name], prefix)
		}
	}
	if refs[Agnhost] != imageutils.GetE2EImage(imageutils.Agnhost) || refs[Pause] != imageutils.GetPauseImageName() {
		t.Errorf("refs differ from imageutils: %v", refs)
	}
	if len(Specs(refs)) != len(refs) {
		t.Errorf("%d specs for %d references", len(Specs(refs)), len(refs))
	}
}

func TestTag(t *testing.T) {
	for ref, want := range map[string]string{
		"registry.k8s.io/e2e-test-images/agnhost:2.56": "2.56",
		"registry.k8s.io/pause:3.10.1":                 "3.10.1",
		"localhost:5000/agnhost":                       "",
		"agnhost":                                      "",
	} {
		if got := tag(ref); got != want {
			t.Errorf("tag(%q) = %q, want %q", ref, got, want)
		}
	}
}

// contextSources are the sources of a Containerfile's COPY lines that
// come from the build context (not --from a stage).
func contextSources(cf string) []string {
	var out []string
	for _, line := range strings.Split(cf, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "COPY" || strings.HasPrefix(f[1], "--from=") {
			continue
		}
		out = append(out, f[1:len(f)-1]...)
	}
	sort.Strings(out)
	return out
}

// froms are the images of a Containerfile's FROM lines, stages and
// scratch left out.
func froms(cf string) []string {
	var out []string
	for _, line := range strings.Split(cf, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "FROM" && f[1] != "scratch" && !slices.Contains(out, f[1]) {
			out = append(out, f[1])
		}
	}
	return out
}

// TestSpecsConsistent: what each Containerfile copies from its context
// is exactly what the spec puts there, and its FROM images are its
// Bases.
func TestSpecsConsistent(t *testing.T) {
	for _, s := range Specs(FrameworkRefs()) {
		var want []string
		for _, b := range s.Binaries {
			want = append(want, b.File)
		}
		for _, p := range s.Programs {
			want = append(want, p.File)
		}
		for _, f := range s.Files {
			want = append(want, f.Name)
		}
		sort.Strings(want)
		if got := contextSources(s.Containerfile); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: COPY from the context %v, the spec provides %v", s.Name, got, want)
		}
		if got := froms(s.Containerfile); !reflect.DeepEqual(got, s.Bases) && len(got)+len(s.Bases) > 0 {
			t.Errorf("%s: FROM %v, Bases %v", s.Name, got, s.Bases)
		}
		if !strings.HasPrefix(s.Containerfile, "# "+s.Ref+",") {
			t.Errorf("%s: the Containerfile does not start by naming %s:\n%s", s.Name, s.Ref, s.Containerfile)
		}
		if len(s.UsedBy) == 0 || s.Upstream == "" {
			t.Errorf("%s: say which tests use it and what upstream's image is", s.Name)
		}
	}
}

func specNamed(t *testing.T, name string) Spec {
	t.Helper()
	for _, s := range Specs(FrameworkRefs()) {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no spec %s", name)
	return Spec{}
}

func TestAgnhostLikeUpstream(t *testing.T) {
	s := specNamed(t, Agnhost)
	cf := s.Containerfile
	for _, want := range []string{
		"FROM docker.io/library/debian:bookworm-slim\n",
		// upstream's tools, by their Debian names
		" bind9-dnsutils ", " curl ", " netcat-openbsd ", " iproute2 ", " iperf ", " bash ",
		"ln -s /usr/bin/iperf /usr/local/bin/iperf",
		"EXPOSE 80 8080 8081 9376 5000\n",
		"RUN mkdir /uploads\n",
		"COPY localhost.crt localhost.key /\n",
		"COPY agnhost /agnhost\n",
		"RUN ln -s agnhost /agnhost-2\n",
		"groupadd -g 50000 group-defined-in-image",
		"useradd -u 1000 ",
		"usermod -a -G group-defined-in-image user-defined-in-image",
		"ENTRYPOINT [\"/agnhost\"]\nCMD [\"pause\"]\n",
	} {
		if !strings.Contains(cf, want) {
			t.Errorf("agnhost's Containerfile lacks %q:\n%s", want, cf)
		}
	}
	if len(s.Binaries) != 1 || s.Binaries[0].Package != "k8s.io/kubernetes/test/images/agnhost" ||
		!strings.Contains(s.Binaries[0].LDFlags, "-X main.Version="+tag(s.Ref)) {
		t.Errorf("agnhost's binary: %+v", s.Binaries)
	}
	if !strings.Contains(cf, "COPY coredns /coredns\n") || len(s.Programs) != 1 || s.Programs[0].Name != CoreDNS {
		t.Errorf("agnhost: /coredns: %+v", s.Programs)
	}
}

func TestPauseFromScratch(t *testing.T) {
	s := specNamed(t, Pause)
	want := "FROM scratch\n# e2e/cmd/pause: waits for SIGINT or SIGTERM, exits 0, reaps orphans as PID 1.\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT [\"/pause\"]\n"
	if !strings.HasSuffix(s.Containerfile, want) || len(s.Bases) != 0 {
		t.Errorf("pause:\n%s\nwant it to end with:\n%s", s.Containerfile, want)
	}
	if s.Binaries[0].Package != "github.com/herald-lb/herald/e2e/cmd/pause" {
		t.Errorf("pause binary: %+v", s.Binaries)
	}
}

func TestInputHash(t *testing.T) {
	files := map[string]string{"agnhost": "aa", "localhost.crt": "bb"}
	bases := map[string]string{DebianBase: "id1"}
	h := InputHash("FROM x\n", files, bases)
	if len(h) != 64 {
		t.Fatalf("hash %q", h)
	}
	same := InputHash("FROM x\n", map[string]string{"localhost.crt": "bb", "agnhost": "aa"}, map[string]string{DebianBase: "id1"})
	if same != h {
		t.Errorf("the same inputs hash differently: %s %s", h, same)
	}
	for name, other := range map[string]string{
		"Containerfile": InputHash("FROM y\n", files, bases),
		"a binary":      InputHash("FROM x\n", map[string]string{"agnhost": "ab", "localhost.crt": "bb"}, bases),
		"a file name":   InputHash("FROM x\n", map[string]string{"agnhost2": "aa", "localhost.crt": "bb"}, bases),
		"one file less": InputHash("FROM x\n", map[string]string{"agnhost": "aa"}, bases),
		"the base":      InputHash("FROM x\n", files, map[string]string{DebianBase: "id2"}),
		"no base":       InputHash("FROM x\n", files, nil),
	} {
		if other == h {
			t.Errorf("a change of %s does not change the hash", name)
		}
	}
	// A file's digest cannot pass for part of the Containerfile.
	if InputHash("a", map[string]string{"b": "c"}, nil) == InputHash("a\nfile \"b\" c\n", nil, nil) {
		t.Error("ambiguous hash input")
	}
}

func TestDecide(t *testing.T) {
	const want = "0123456789abcdef0123"
	for _, tc := range []struct {
		name    string
		cur     Current
		rebuild bool
		build   bool
		why     string
	}{
		{"missing", Current{}, false, true, "missing"},
		{"missing, rebuild", Current{}, true, true, "missing"},
		{"same inputs", Current{Exists: true, ID: "x", Labels: map[string]string{InputsLabel: want}}, false, false, "up to date (0123456789ab)"},
		{"same inputs, rebuild", Current{Exists: true, ID: "x", Labels: map[string]string{InputsLabel: want}}, true, true, "rebuild asked for"},
		{"other inputs", Current{Exists: true, ID: "x", Labels: map[string]string{InputsLabel: "fedcba9876543210"}}, false, true, "inputs changed (fedcba987654, now 0123456789ab)"},
		{"no label", Current{Exists: true, ID: "x"}, false, true, "present without the io.herald.e2eimages.inputs label (not made here)"},
	} {
		build, why := Decide(tc.cur, want, tc.rebuild)
		if build != tc.build || why != tc.why {
			t.Errorf("%s: %v %q, want %v %q", tc.name, build, why, tc.build, tc.why)
		}
	}
}

func TestParseInspect(t *testing.T) {
	out := []byte(`[{"Id": "abc123", "Labels": {"io.herald.e2eimages.inputs": "h1", "other": "x"}, "Config": {}}]`)
	cur, err := parseInspect(out)
	if err != nil || !cur.Exists || cur.ID != "abc123" || cur.Labels[InputsLabel] != "h1" {
		t.Errorf("%+v %v", cur, err)
	}
	for _, bad := range []string{`[]`, `[{"Id": ""}]`, `{`, `[{"Id":"a"},{"Id":"b"}]`} {
		if _, err := parseInspect([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestSelect(t *testing.T) {
	specs := Specs(FrameworkRefs())
	got, err := Select(specs, []string{Pause, Agnhost})
	if err != nil || len(got) != 2 || got[0].Name != Agnhost || got[1].Name != Pause {
		t.Errorf("Select pause, agnhost: %v %v", got, err)
	}
	if _, err := Select(specs, []string{"agnhost", "coredns"}); err == nil || !strings.Contains(err.Error(), `"coredns"`) {
		t.Errorf("an unknown name: %v", err)
	}
	if got, _ := Select(specs, nil); len(got) != len(specs) {
		t.Errorf("no names selects all: %d", len(got))
	}
}

// fakeRunner keeps images in memory and "builds" binaries as files
// holding programs[package].
type fakeRunner struct {
	t        *testing.T
	k8sDir   string
	programs map[string]string
	images   map[string]Current
	builds   []string // refs, in order
	removed  []string
	bases    int
	goBuilds int
	coredns  string

	programCalls int
}

func newFake(t *testing.T) *fakeRunner {
	k8s := t.TempDir()
	porter := filepath.Join(k8s, "test/images/agnhost/porter")
	if err := os.MkdirAll(porter, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"localhost.crt", "localhost.key"} {
		if err := os.WriteFile(filepath.Join(porter, n), []byte(n+" content"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	return &fakeRunner{t: t, k8sDir: k8s, images: map[string]Current{}, coredns: "CoreDNS-1.12.1",
		programs: map[string]string{
			"k8s.io/kubernetes/test/images/agnhost":                "agnhost v1",
			"github.com/herald-lb/herald/e2e/cmd/pause":            "pause v1",
			"k8s.io/kubernetes/test/images/regression-issue-74839": "boom v1",
		}}
}

func (f *fakeRunner) ModuleDir(_ context.Context, _, path string) (string, error) {
	if path != KubernetesModule {
		return "", fmt.Errorf("module %s", path)
	}
	return f.k8sDir, nil
}

func (f *fakeRunner) GoBuild(_ context.Context, _ string, b Binary, out string) error {
	f.goBuilds++
	p, ok := f.programs[b.Package]
	if !ok {
		return fmt.Errorf("no package %s", b.Package)
	}
	return os.WriteFile(out, []byte(p+" "+b.LDFlags), 0o755)
}

func (f *fakeRunner) Program(_ context.Context, _, name string) (string, error) {
	f.programCalls++
	if name != CoreDNS {
		return "", fmt.Errorf("program %s", name)
	}
	path := filepath.Join(f.k8sDir, "coredns")
	return path, os.WriteFile(path, []byte(f.coredns), 0o755)
}

func (f *fakeRunner) Inspect(_ context.Context, ref string) (Current, error) {
	return f.images[ref], nil
}

func (f *fakeRunner) Build(_ context.Context, dir, ref string, labels map[string]string) (string, error) {
	cf, err := os.ReadFile(filepath.Join(dir, "Containerfile"))
	if err != nil {
		return "", err
	}
	// Every file the Containerfile copies is in the context.
	for _, src := range contextSources(string(cf)) {
		if _, err := os.Stat(filepath.Join(dir, src)); err != nil {
			f.t.Errorf("%s: the context lacks %s", ref, src)
		}
	}
	for _, b := range froms(string(cf)) {
		if !f.images[b].Exists {
			return "", fmt.Errorf("FROM %s: missing", b)
		}
	}
	f.builds = append(f.builds, ref)
	sum := sha256.Sum256([]byte(ref + labels[InputsLabel]))
	id := hex.EncodeToString(sum[:])
	f.images[ref] = Current{Exists: true, ID: id, Labels: labels}
	return id, nil
}

func (f *fakeRunner) Remove(_ context.Context, id string) error {
	f.removed = append(f.removed, id)
	return nil
}

func (f *fakeRunner) MakeBase(_ context.Context, repoDir string) error {
	f.bases++
	if _, err := os.Stat(filepath.Join(repoDir, "hack")); err != nil {
		return fmt.Errorf("no hack/ in %s", repoDir)
	}
	f.images[DebianBase] = Current{Exists: true, ID: fmt.Sprintf("debian%d", f.bases)}
	return nil
}

func TestEnsure(t *testing.T) {
	ctx := context.Background()
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "hack"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := newFake(t)
	var log bytes.Buffer
	opts := Options{ModuleDir: filepath.Join(repo, "e2e"), RepoDir: repo, CacheDir: t.TempDir(), Runner: f, Log: &log}
	all := len(Specs(FrameworkRefs()))

	// From nothing: the base is made once, every image built.
	res, err := Ensure(ctx, opts)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if f.bases != 1 || len(f.builds) != all || res.Built() != all || len(res.LeftOut) == 0 {
		t.Fatalf("first run: %d bases, builds %v, result %+v", f.bases, f.builds, res)
	}
	first := map[string]Image{}
	for _, im := range res.Images {
		first[im.Name] = im
		if !im.Built || im.Why != "missing" || im.ID == "" || f.images[im.Ref].Labels[InputsLabel] != im.Inputs {
			t.Errorf("first run, %s: %+v", im.Name, im)
		}
	}
	if !strings.Contains(log.String(), "e2eimages: built registry.k8s.io/pause:") {
		t.Errorf("the log does not say what it built:\n%s", log.String())
	}

	// Nothing changed: nothing built.
	f.builds = nil
	res, err = Ensure(ctx, opts)
	if err != nil || len(f.builds) != 0 || res.Built() != 0 || f.bases != 1 {
		t.Fatalf("second run: builds %v, %d bases, %v", f.builds, f.bases, err)
	}
	for _, im := range res.Images {
		if im.ID != first[im.Name].ID || im.Inputs != first[im.Name].Inputs {
			t.Errorf("second run, %s: %+v, first %+v", im.Name, im, first[im.Name])
		}
	}

	// agnhost's program changed: agnhost alone is built, the image it
	// replaces removed.
	f.programs["k8s.io/kubernetes/test/images/agnhost"] = "agnhost v2"
	res, err = Ensure(ctx, opts)
	if err != nil || !reflect.DeepEqual(f.builds, []string{first[Agnhost].Ref}) {
		t.Fatalf("after agnhost changed: builds %v, %v", f.builds, err)
	}
	if im, _ := res.Image(Agnhost); !strings.HasPrefix(im.Why, "inputs changed") || im.ID == first[Agnhost].ID {
		t.Errorf("agnhost after its change: %+v", im)
	}
	if !reflect.DeepEqual(f.removed, []string{first[Agnhost].ID}) {
		t.Errorf("removed %v, want agnhost's old image", f.removed)
	}

	// A new CoreDNS: agnhost again, alone.
	f.builds = nil
	f.coredns = "CoreDNS-1.12.2"
	if _, err := Ensure(ctx, opts); err != nil || !reflect.DeepEqual(f.builds, []string{first[Agnhost].Ref}) {
		t.Fatalf("after CoreDNS changed: builds %v, %v", f.builds, err)
	}

	// A new base image: everything on it is built again, pause (FROM
	// scratch) is not.
	f.builds = nil
	f.images[DebianBase] = Current{Exists: true, ID: "debian-new"}
	if _, err := Ensure(ctx, opts); err != nil {
		t.Fatal(err)
	}
	if len(f.builds) != all-1 || slices.Contains(f.builds, first[Pause].Ref) {
		t.Errorf("after the base changed: builds %v", f.builds)
	}

	// Only and Rebuild.
	f.builds = nil
	opts.Only, opts.Rebuild = []string{Pause}, true
	res, err = Ensure(ctx, opts)
	if err != nil || !reflect.DeepEqual(f.builds, []string{first[Pause].Ref}) || len(res.Images) != 1 {
		t.Errorf("-only pause -rebuild: builds %v, %v", f.builds, err)
	}
	var report bytes.Buffer
	res.Report(&report)
	if !strings.Contains(report.String(), first[Pause].Ref) || !strings.Contains(report.String(), "not built: ") {
		t.Errorf("report:\n%s", report.String())
	}

	// The go builds (and CoreDNS) happen once per binary and call, not
	// per image.
	f.goBuilds, f.programCalls = 0, 0
	opts.Only, opts.Rebuild = nil, false
	if _, err := Ensure(ctx, opts); err != nil {
		t.Fatal(err)
	}
	if f.goBuilds != 3 || f.programCalls != 1 {
		t.Errorf("%d go builds, want 3 (agnhost, pause, regression-issue-74839); %d programs made, want 1 (CoreDNS)", f.goBuilds, f.programCalls)
	}
}

func TestEnsureBaseCannotBeMade(t *testing.T) {
	f := newFake(t)
	repo := t.TempDir() // no hack/: MakeBase fails
	_, err := Ensure(context.Background(), Options{ModuleDir: filepath.Join(repo, "e2e"), RepoDir: repo, CacheDir: t.TempDir(), Runner: f, Only: []string{BusyBox}})
	if err == nil || !strings.Contains(err.Error(), "busybox") || !strings.Contains(err.Error(), "no hack/") {
		t.Errorf("err %v", err)
	}
	// pause needs no base.
	if _, err := Ensure(context.Background(), Options{ModuleDir: filepath.Join(repo, "e2e"), RepoDir: repo, CacheDir: t.TempDir(), Runner: f, Only: []string{Pause}}); err != nil {
		t.Errorf("pause: %v", err)
	}
}
