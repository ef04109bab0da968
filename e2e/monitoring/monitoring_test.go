package monitoring

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// bundle is the monitoring folder at the repository's root.
const bundle = "../../monitoring"

func promtool(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cache, err := filepath.Abs(filepath.Join("..", "_cache", "tools"))
	if err != nil {
		t.Fatal(err)
	}
	bin, err := Promtool(ctx, cache)
	if err != nil {
		t.Fatalf("promtool from Debian's prometheus package: %v", err)
	}
	return bin
}

func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	c := exec.Command(bin, args...)
	c.Dir = bundle
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestRules: promtool accepts the rules (syntax, PromQL, templates) and
// their unit tests pass: each alert fires on the series it is about, with
// its labels and texts, and stays quiet on healthy ones.
func TestRules(t *testing.T) {
	bin := promtool(t)
	t.Log(run(t, bin, "check", "rules", "rules.yaml"))
	t.Log(run(t, bin, "test", "rules", "rules_test.yaml"))
}

// TestPrometheusRuleIsRules: the operator's PrometheusRule holds exactly
// the groups of rules.yaml.
func TestPrometheusRuleIsRules(t *testing.T) {
	var rules, pr struct {
		Groups any `json:"groups"`
		Spec   struct {
			Groups any `json:"groups"`
		} `json:"spec"`
	}
	read(t, "rules.yaml", &rules)
	read(t, "prometheusrule.yaml", &pr)
	if rules.Groups == nil || !reflect.DeepEqual(rules.Groups, pr.Spec.Groups) {
		t.Errorf("prometheusrule.yaml's spec.groups differ from rules.yaml's groups")
	}
}

func read(t *testing.T, name string, into any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(bundle, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

var metricName = regexp.MustCompile(`herald_[a-z0-9_]+`)

// exported are the metric names herald's Go code defines (string literals
// in the root module's non-test files).
func exported(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, dir := range []string{"../../controller", "../../speaker", "../../proxy", "../../internal"} {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range regexp.MustCompile(`"(herald_[a-z0-9_]+)"`).FindAllStringSubmatch(string(data), -1) {
				names[m[1]] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// TestNamesExist: every herald metric the rules and the dashboard use is
// one herald exports (histograms by their _bucket, _sum, _count series).
func TestNamesExist(t *testing.T) {
	have := exported(t)
	if !have["herald_build_info"] || !have["herald_controller_pool_addresses"] {
		t.Fatalf("found %d metric names in the Go sources, not the ones expected; is the path right?", len(have))
	}
	for _, f := range []string{"rules.yaml", "grafana-dashboard.json"} {
		data, err := os.ReadFile(filepath.Join(bundle, f))
		if err != nil {
			t.Fatal(err)
		}
		used := map[string]bool{}
		for _, m := range metricName.FindAllString(string(data), -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(m, suffix); ok && have[base] {
					m = base
				}
			}
			used[m] = true
		}
		var missing []string
		for m := range used {
			if !have[m] {
				missing = append(missing, m)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("%s uses metrics herald does not export: %v", f, missing)
		}
		t.Logf("%s uses %d herald metrics", f, len(used))
	}
}

// TestDashboard: the dashboard is valid JSON for Grafana's provisioning:
// unique panel ids, every query on the ${datasource} variable.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(bundle, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr       string `json:"expr"`
				Datasource struct {
					UID string `json:"uid"`
				} `json:"datasource"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("uid %q, %d panels", d.UID, len(d.Panels))
	}
	var ids []int
	for _, p := range d.Panels {
		if slices.Contains(ids, p.ID) {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids = append(ids, p.ID)
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if q.Expr == "" || q.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: query %q on datasource %q", p.Title, q.Expr, q.Datasource.UID)
			}
		}
	}
}
