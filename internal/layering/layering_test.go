package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/herald-lb/herald"

var components = []string{"controller", "speaker", "proxy"}

// componentOf names the component a package belongs to, or "".
func componentOf(pkg string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	for _, c := range components {
		if rel == c || strings.HasPrefix(rel, c+"/") {
			return c
		}
	}
	return ""
}

func TestComponentsDoNotImportEachOther(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps=false", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, deps := f[0], f[1:]
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if rel == "cmd/herald" || strings.HasPrefix(rel, "cmd/herald/") {
			// The composition root and its commands: herald status
			// resolves BGP announcements with the speaker's own rule.
			continue
		}
		own := componentOf(pkg)
		for _, d := range deps {
			if !strings.HasPrefix(d, module) {
				continue
			}
			if c := componentOf(d); c != "" && c != own {
				where := "package"
				if own != "" {
					where = "component " + own + ": package"
				}
				t.Errorf("%s %s imports %s (component %s): components meet only in cmd/herald/cli", where, pkg, d, c)
			}
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("only %d packages listed; is this the herald module?", checked)
	}
}

// TestSharedGroundPointsDown: config and internal/ are what every layer
// stands on; they import no component and nothing of the command line.
func TestSharedGroundPointsDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/internal/...", module+"/config/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, d := range f[1:] {
			rel, ok := strings.CutPrefix(d, module+"/")
			if !ok {
				continue
			}
			if componentOf(d) != "" || rel == "cmd" || strings.HasPrefix(rel, "cmd/") {
				t.Errorf("%s imports %s: config and internal/ stand below the components and the command line", f[0], d)
			}
		}
		checked++
	}
	if checked < 10 {
		t.Fatalf("only %d packages listed", checked)
	}
}

// decisions are the packages that decide (docs/architecture.md: pure
// functions tested with tables): nothing in them reaches the API, the
// network or the kernel, so their tests need no root, no cluster and no
// fake of either.
var decisions = []string{
	"controller/allocator",
	"speaker/bgp/plan",
	"speaker/layer2/election",
	"speaker/layer2/plan",
	"speaker/partition",
}

// sideEffects are the modules through which a package acts on the world.
var sideEffects = []string{
	"k8s.io/client-go",
	"github.com/hashicorp/memberlist",
	"github.com/osrg/gobgp",
	"github.com/vishvananda/netlink",
	"github.com/mdlayher/packet",
	"github.com/google/nftables",
	"github.com/coreos/go-iptables",
	"github.com/prometheus/client_golang",
}

// TestDecisionsArePure: no decision package depends, even indirectly,
// on a module with side effects.
func TestDecisionsArePure(t *testing.T) {
	for _, p := range decisions {
		out, err := exec.Command("go", "list", "-deps", module+"/"+p).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", p, err, out)
		}
		for _, d := range strings.Fields(string(out)) {
			for _, m := range sideEffects {
				if d == m || strings.HasPrefix(d, m+"/") {
					t.Errorf("%s depends on %s: decisions take their inputs as values and stay pure", p, d)
				}
			}
		}
	}
}
