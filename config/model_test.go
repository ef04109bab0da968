package config

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseValidSample(t *testing.T) {
	var l Loader
	if err := l.LoadFiles([]string{"samples/valid.yaml"}); err != nil {
		t.Fatal(err)
	}
	l.Resources.Namespace = "herald-system"
	cfg, problems := Parse(l.Resources)
	if len(problems) > 0 || len(l.Problems) > 0 {
		t.Fatalf("valid sample has problems:\n%s\n%s", problems.Error(), l.Problems.Error())
	}
	if got := cfg.PoolNames(); !reflect.DeepEqual(got, []string{"lan", "routed", "team-a"}) {
		t.Fatalf("pools %v", got)
	}
	lan := cfg.Pools["lan"]
	if !lan.AutoAssign || lan.AvoidBuggyIPs || lan.Allocation != nil {
		t.Errorf("lan defaults wrong: %+v", lan)
	}
	wantRanges := []string{"192.0.2.0/26", "192.0.2.100-192.0.2.120", "2001:db8:100::/120"}
	for i, r := range lan.Ranges {
		if r.String() != wantRanges[i] {
			t.Errorf("lan range %d = %s, want %s", i, r, wantRanges[i])
		}
	}
	if cfg.Pools["routed"].AutoAssign || !cfg.Pools["routed"].AvoidBuggyIPs {
		t.Errorf("routed flags wrong: %+v", cfg.Pools["routed"])
	}
	a := cfg.Pools["team-a"].Allocation
	if a == nil || !a.HasPriority || a.Priority != 10 || !reflect.DeepEqual(a.Namespaces, []string{"team-a"}) ||
		!a.NamespaceSelectors.Any(map[string]string{"team": "a"}) || a.NamespaceSelectors.Any(map[string]string{"team": "b"}) ||
		!a.ServiceSelectors.Any(map[string]string{"exposure": "public"}) {
		t.Errorf("team-a allocation wrong: %+v", a)
	}
	if p := cfg.PoolFor(netip.MustParseAddr("192.0.2.110")); p == nil || p.Name != "lan" {
		t.Errorf("PoolFor(192.0.2.110) = %v", p)
	}
	if p := cfg.PoolFor(netip.MustParseAddr("192.0.2.99")); p != nil {
		t.Errorf("PoolFor(192.0.2.99) = %s, want none", p.Name)
	}

	core := cfg.Peers["core-router"]
	if core.Port != 179 || core.HoldTime != 9*time.Second || core.KeepaliveTime != 3*time.Second ||
		core.Password.Reveal() != "not-a-real-secret" || core.BFD == nil || core.BFD.Name != "fast" || !core.External() || !core.GracefulRestart {
		t.Errorf("core-router wrong: %+v", core)
	}
	if b := core.BFD; b.ReceiveInterval != 100 || b.TransmitInterval != 100 || b.DetectMultiplier != 3 {
		t.Errorf("bfd wrong: %+v", b)
	}
	v6 := cfg.Peers["core-router-v6"]
	if v6.HoldTime != DefaultHoldTime || v6.KeepaliveTime != 30*time.Second || v6.DynamicASN != "external" || !v6.External() ||
		v6.NodeSelectors.MatchesOrEmpty(map[string]string{}) || !v6.NodeSelectors.MatchesOrEmpty(map[string]string{"bgp": "enabled"}) {
		t.Errorf("core-router-v6 wrong: %+v", v6)
	}
	if rr := cfg.Peers["route-reflector"]; rr.External() || rr.Port != 1179 {
		t.Errorf("route-reflector wrong: %+v", rr)
	}

	if len(cfg.L2Advertisements) != 1 {
		t.Fatalf("l2 advertisements: %d", len(cfg.L2Advertisements))
	}
	l2 := cfg.L2Advertisements[0]
	if !reflect.DeepEqual(l2.Pools, []string{"lan", "team-a"}) || !reflect.DeepEqual(l2.Interfaces, []string{"eth0"}) ||
		l2.NodeSelectors.MatchesOrEmpty(map[string]string{"node-role.kubernetes.io/control-plane": ""}) {
		t.Errorf("l2 advertisement wrong: %+v", l2)
	}

	advs := map[string]*BGPAdvertisement{}
	for _, a := range cfg.BGPAdvertisements {
		advs[a.Name] = a
	}
	routed := advs["routed"]
	var comms []string
	for _, c := range routed.Communities {
		comms = append(comms, c.String())
	}
	if want := []string{"64512:100", "large:64512:1:100", "65535:65281", "65535:666"}; !reflect.DeepEqual(comms, want) {
		t.Errorf("communities %v, want %v", comms, want)
	}
	if !reflect.DeepEqual(routed.Pools, []string{"routed"}) || routed.LocalPref == nil || *routed.LocalPref != 200 || len(routed.Peers) != 0 {
		t.Errorf("routed advertisement wrong: %+v", routed)
	}
	if agg := advs["routed-aggregate"]; agg.AggregationLength != 24 || agg.AggregationLengthV6 != 128 || !reflect.DeepEqual(agg.Peers, []string{"core-router"}) {
		t.Errorf("routed-aggregate wrong: %+v", agg)
	}
}

func TestPartialFailureKeepsGoodPools(t *testing.T) {
	cfg, problems := load(t,
		pool("good-1", "  addresses: [192.0.2.0/28]"),
		pool("bad", "  addresses: [192.0.2.64/28, 192.0.2.200-192.0.2.100]"),
		pool("good-2", "  addresses: [203.0.113.0/28]"),
		l2("all", "  ipAddressPools: [good-1, bad, good-2]"),
	)
	if got := cfg.PoolNames(); !reflect.DeepEqual(got, []string{"good-1", "good-2"}) {
		t.Fatalf("pools in model %v, want good-1 and good-2", got)
	}
	// The bad pool's valid entry must not reserve its addresses either.
	if cfg.PoolFor(netip.MustParseAddr("192.0.2.70")) != nil {
		t.Errorf("an address of the left-out pool is still owned")
	}
	if len(cfg.L2Advertisements) != 1 || !reflect.DeepEqual(cfg.L2Advertisements[0].Pools, []string{"good-1", "good-2"}) {
		t.Fatalf("advertisement should keep the good pools: %+v", cfg.L2Advertisements)
	}
	want := []string{
		"IPAddressPool herald-system/bad: spec.addresses[1]: \"192.0.2.200-192.0.2.100\" starts after it ends: write it as 192.0.2.100-192.0.2.200",
		"L2Advertisement herald-system/all: spec.ipAddressPools[1]: IPAddressPool bad has problems and is not in use (warning)",
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestOlderObjectWins: when two pools overlap, the one created first keeps
// the addresses whatever the names; objects not yet created are newest.
func TestOlderObjectWins(t *testing.T) {
	older := "apiVersion: herald.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: zz-old, namespace: herald-system, creationTimestamp: \"2025-01-01T00:00:00Z\"}\nspec: {addresses: [192.0.2.0/24]}"
	newer := "apiVersion: herald.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: aa-new, namespace: herald-system, creationTimestamp: \"2026-06-01T00:00:00Z\"}\nspec: {addresses: [192.0.2.128/25]}"
	file := pool("aaa-file", "  addresses: [192.0.2.0/30]")
	cfg, problems := load(t, newer, file, older)
	if got := cfg.PoolNames(); !reflect.DeepEqual(got, []string{"zz-old"}) {
		t.Fatalf("pools %v, want only zz-old", got)
	}
	if len(problems.For(KindIPAddressPool, "herald-system", "aa-new")) != 1 || len(problems.For(KindIPAddressPool, "herald-system", "aaa-file")) != 1 {
		t.Fatalf("want one problem each for aa-new and aaa-file:\n%s", problems.Error())
	}
}

func TestParseIsDeterministic(t *testing.T) {
	docs := []string{base, pool("p", "  addresses: [198.51.100.0/25]"), bgp("a", "  communities: [x, y]\n  peers: [q]"), l2("b", "  ipAddressPools: [r, s]")}
	_, first := load(t, docs...)
	for i := 0; i < 20; i++ {
		_, again := load(t, docs...)
		if !reflect.DeepEqual(first, again) {
			t.Fatalf("run %d differs:\n%s\n---\n%s", i, first.Error(), again.Error())
		}
	}
}

func TestSecretNeverPrinted(t *testing.T) {
	cfg, problems := load(t, base, peer("x", "  myASN: 64512\n  peerASN: 64500\n  peerAddress: 198.18.0.9\n  passwordSecret: {name: md5}"))
	if len(problems) > 0 {
		t.Fatal(problems.Error())
	}
	p := cfg.Peers["x"]
	if p.Password.Reveal() != "s3cret" {
		t.Fatalf("password not resolved from the Secret")
	}
	for _, out := range []string{fmt.Sprintf("%v", *p), fmt.Sprintf("%+v", *p), fmt.Sprintf("%#v", *p), fmt.Sprint(p.Password)} {
		if strings.Contains(out, "s3cret") {
			t.Errorf("password leaked: %s", out)
		}
	}
}

func TestSecretsUnavailable(t *testing.T) {
	var l Loader
	if err := l.Load("t", strings.NewReader(peer("x", "  myASN: 64512\n  peerASN: 64500\n  peerAddress: 198.18.0.9\n  passwordSecret: {name: elsewhere}"))); err != nil {
		t.Fatal(err)
	}
	l.Resources.SecretsUnavailable = true
	cfg, problems := Parse(l.Resources)
	if len(problems) > 0 || cfg.Peers["x"] == nil {
		t.Fatalf("offline parse should not require the Secret: %s", problems.Error())
	}
}

// TestParserRefusesWhatTheSchemaRefuses keeps herald validate and the CRD in
// step: every object the API server refuses (config/samples/invalid-schema,
// proved against the schema in config/crd) is refused by the parser too, on
// the same field.
func TestParserRefusesWhatTheSchemaRefuses(t *testing.T) {
	files, err := filepath.Glob("samples/invalid-schema/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no invalid-schema samples: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var field string
			for _, line := range strings.Split(string(data), "\n") {
				if v, ok := strings.CutPrefix(line, "# field: "); ok {
					field = strings.TrimSpace(v)
				}
			}
			var l Loader
			if err := l.Load(f, strings.NewReader(string(data))); err != nil {
				t.Fatal(err)
			}
			l.Resources.SecretsUnavailable = true
			_, problems := Parse(l.Resources)
			all := append(append(Problems{}, l.Problems...), problems...)
			for _, p := range all {
				if p.Severity == Error && (p.Field == field || strings.HasPrefix(p.Field, field+".") || strings.HasPrefix(p.Field, field+"[")) {
					return
				}
			}
			t.Errorf("the API server refuses %s on %s, the parser does not:\n%s", f, field, all.Error())
		})
	}
}
