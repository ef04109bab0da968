package tracer

import (
	"errors"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, text, want string
	}{
		{"no commit", "*nat\n:X - [0:0]\n", "never COMMITted"},
		{"unknown table", "*security\nCOMMIT\n", "unknown table"},
		{"outside table", "-A X -j ACCEPT\n", "outside a table"},
		{"nested table", "*nat\n*filter\nCOMMIT\n", "before COMMIT"},
		{"append to missing chain", "*nat\n-A NOPE -j RETURN\nCOMMIT\n", `chain "NOPE" does not exist`},
		{"jump to missing chain", "*nat\n:A - [0:0]\n-A A -j B\nCOMMIT\n", `jumps to "B"`},
		{"jump to builtin", "*nat\n:A - [0:0]\n-A A -j OUTPUT\nCOMMIT\n", "built-in chain"},
		{"unknown module", "*nat\n:A - [0:0]\n-A A -m owner --uid-owner 0 -j RETURN\nCOMMIT\n", "unsupported match module"},
		{"bad probability", "*nat\n:A - [0:0]\n-A A -m statistic --mode random --probability 1.5 -j RETURN\nCOMMIT\n", "--probability"},
		{"bad address", "*nat\n:A - [0:0]\n-A A -d 10.0.0.300 -j RETURN\nCOMMIT\n", "-d"},
		{"tcp without -p", "*nat\n:A - [0:0]\n-A A -m tcp --dport 80 -j RETURN\nCOMMIT\n", "needs -p tcp"},
		{"dport without proto", "*nat\n:A - [0:0]\n-A A --dport 80 -j RETURN\nCOMMIT\n", "needs -p"},
		{"DNAT in filter", "*filter\n:A - [0:0]\n-A A -p tcp -j DNAT --to-destination 10.0.0.1:80\nCOMMIT\n", "not valid in table filter"},
		{"REJECT in nat", "*nat\n:A - [0:0]\n-A A -j REJECT\nCOMMIT\n", "not valid in table nat"},
		{"unterminated quote", "*nat\n:A - [0:0]\n-A A -m comment --comment \"oops -j RETURN\nCOMMIT\n", "unterminated quote"},
		{"delete non-empty", "*nat\n:A - [0:0]\n-A A -j RETURN\n-X A\nCOMMIT\n", "still has 1 rules"},
		{"delete builtin", "*nat\n-X OUTPUT\nCOMMIT\n", "built-in"},
		{"unsupported command", "*nat\n-I OUTPUT -j RETURN\nCOMMIT\n", "unsupported command"},
		{"option without module", "*nat\n:A - [0:0]\n-A A --probability 0.5 -j RETURN\nCOMMIT\n", "does not belong"},
		{"dangling bang", "*nat\n:A - [0:0]\n-A A ! -j RETURN\nCOMMIT\n", "! before -j"},
		{"trailing bang", "*nat\n:A - [0:0]\n-A A -j RETURN !\nCOMMIT\n", "unexpected"},
		{"non-negatable", "*nat\n:A - [0:0]\n-A A -m comment ! --comment x -j RETURN\nCOMMIT\n", "cannot be negated"},
		{"bad target option", "*nat\n:A - [0:0]\n-A A -p tcp -j DNAT --to-source 1.2.3.4\nCOMMIT\n", "not supported for target DNAT"},
		{"MARK without op", "*nat\n:A - [0:0]\n-A A -j MARK\nCOMMIT\n", "MARK needs"},
		{"recent without mode", "*nat\n:A - [0:0]\n-A A -m recent --name x -j RETURN\nCOMMIT\n", "needs one of"},
		{"long chain name", "*nat\n:ABCDEFGHIJKLMNOPQRSTUVWXYZ0123 - [0:0]\nCOMMIT\n", "1-28 characters"},
		{"policy on user chain", "*nat\n:A ACCEPT [0:0]\nCOMMIT\n", "cannot have a policy"},
		{"addrtype other than LOCAL", "*nat\n:A - [0:0]\n-A A -m addrtype --dst-type UNICAST -j RETURN\nCOMMIT\n", "only LOCAL"},
		{"unknown ctstate", "*filter\n:A - [0:0]\n-A A -m conntrack --ctstate FRESH -j ACCEPT\nCOMMIT\n", "unknown state"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.text)
			if err == nil {
				t.Fatalf("Parse accepted invalid input")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *ParseError", err)
			}
			if pe.Line < 1 || pe.Doc != 1 {
				t.Fatalf("error points at doc %d line %d", pe.Doc, pe.Line)
			}
		})
	}
}

func TestParseRejectsMixedFamilies(t *testing.T) {
	_, err := Parse("*nat\n:A - [0:0]\n-A A -d 10.0.0.1 -j RETURN\n-A A -d fd00::1 -j RETURN\nCOMMIT\n")
	if err == nil || !strings.Contains(err.Error(), "mix IPv4 and IPv6") {
		t.Fatalf("got %v, want a mixed-family error", err)
	}
}

// A small nat/filter pair exercising each construct the tracer models.
const sample = `*nat
:SVC - [0:0]
:EP1 - [0:0]
:EP2 - [0:0]
:EP3 - [0:0]
:MASQ - [0:0]
:POST - [0:0]
:GOTO - [0:0]
-A PREROUTING -j SVC
-A OUTPUT -j SVC
-A POSTROUTING -j POST
-A POST -m mark ! --mark 0x4000/0x4000 -j RETURN
-A POST -j MARK --xor-mark 0x4000
-A POST -j MASQUERADE --random-fully
-A MASQ -j MARK --or-mark 0x4000
-A SVC -p tcp -d 10.96.0.1 --dport 80 ! -s 10.244.0.0/16 -j MASQ
-A SVC -m tcp -p tcp -d 10.96.0.1 --dport 80 -m statistic --mode random --probability 0.3333333333 -j EP1
-A SVC -m tcp -p tcp -d 10.96.0.1 --dport 80 -m statistic --mode random --probability 0.5000000000 -j EP2
-A SVC -m tcp -p tcp -d 10.96.0.1 --dport 80 -j EP3
-A SVC -m tcp -p tcp -d 10.96.0.2 --dport 80 -g GOTO
-A SVC -m tcp -p tcp -d 10.96.0.2 --dport 80 -j EP1
-A GOTO -s 192.0.2.0/24 -j RETURN
-A GOTO -p tcp -j DNAT --to-destination 10.244.9.9:9
-A EP1 -m comment --comment "ns/a -> 1" -p tcp -j DNAT --to-destination 10.244.1.1:8080
-A EP2 -p tcp -j DNAT --to-destination 10.244.1.2:8080
-A EP3 -p tcp -j DNAT --to-destination 10.244.1.3:8080
COMMIT
*filter
:FW - [0:0]
-A FORWARD -m conntrack --ctstate NEW -j FW
-A OUTPUT -m conntrack --ctstate NEW -j FW
-A FW -p tcp -d 10.96.0.3 --dport 80 -j REJECT --reject-with icmp-port-unreachable
-A FW -p tcp -d 10.96.0.4 --dport 80 -j DROP
-A FW -m conntrack --ctstate DNAT -p tcp -d 10.244.1.2 -j DROP
COMMIT
`

func mustParse(t *testing.T, docs ...string) *Tracer {
	t.Helper()
	tr, err := Parse(docs...)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestStatisticBranchesAreUniform(t *testing.T) {
	tr := mustParse(t, sample)
	res, err := tr.Trace(Flow{Origin: Pod, Src: addr("10.244.5.5"), Proto: "tcp", Dst: addr("10.96.0.1"), Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	// EP2 is dropped by the filter rule matching DNATed packets to it.
	byDst := map[string]float64{}
	for _, o := range res.Outcomes {
		key := o.Verdict.String() + " " + o.Dst.String()
		byDst[key] += o.Probability
	}
	want := map[string]float64{"ACCEPT 10.244.1.1:8080": 1.0 / 3, "DROP 10.244.1.2:8080": 1.0 / 3, "ACCEPT 10.244.1.3:8080": 1.0 / 3}
	if len(byDst) != len(want) {
		t.Fatalf("outcomes %v, want %v\n%s", byDst, want, res.Explain())
	}
	for k, p := range want {
		if math.Abs(byDst[k]-p) > 1e-6 {
			t.Errorf("%s: probability %.6f, want %.6f", k, byDst[k], p)
		}
	}
	if m, ok := res.Masquerade(); !ok || m {
		t.Errorf("pod traffic masquerade=%v consistent=%v, want no masquerade", m, ok)
	}
}

func TestMasqueradeFollowsMark(t *testing.T) {
	tr := mustParse(t, sample)
	res, err := tr.Trace(Flow{Origin: External, Src: addr("203.0.113.7"), Proto: "tcp", Dst: addr("10.96.0.1"), Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range res.Outcomes {
		if o.Verdict == Accept && !o.Masquerade {
			t.Errorf("off-cluster source not masqueraded: %v\n%s", o, res.Explain())
		}
	}
}

func TestGotoReturnsToCaller(t *testing.T) {
	tr := mustParse(t, sample)
	// 192.0.2.x RETURNs from GOTO, which (being a goto) returns from SVC
	// to PREROUTING: no DNAT at all, the EP1 rule after the goto is skipped.
	res, err := tr.Trace(Flow{Origin: External, Src: addr("192.0.2.1"), Proto: "tcp", Dst: addr("10.96.0.2"), Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outcomes) != 1 || res.Outcomes[0].DNAT {
		t.Fatalf("want one un-NATed outcome, got %v\n%s", res, res.Explain())
	}
	res, _ = tr.Trace(Flow{Origin: External, Src: addr("198.18.0.1"), Proto: "tcp", Dst: addr("10.96.0.2"), Port: 80})
	if got := res.Endpoints(); !slices.Equal(got, []string{"10.244.9.9:9"}) {
		t.Fatalf("goto DNAT: got %v", got)
	}
}

func TestFilterVerdicts(t *testing.T) {
	tr := mustParse(t, sample)
	for _, c := range []struct {
		dst  string
		want Verdict
	}{{"10.96.0.3", Reject}, {"10.96.0.4", Drop}, {"10.96.0.5", Accept}} {
		for _, o := range []Origin{External, Pod, Node} {
			res, err := tr.Trace(Flow{Origin: o, Src: addr("10.244.5.5"), Proto: "tcp", Dst: addr(c.dst), Port: 80})
			if err != nil {
				t.Fatal(err)
			}
			if v := res.Verdicts(); !slices.Equal(v, []Verdict{c.want}) {
				t.Errorf("%s from %s: verdicts %v, want %v", c.dst, o, v, c.want)
			}
		}
	}
}

func TestBuiltinPolicyAndAddrtype(t *testing.T) {
	tr := mustParse(t, `*filter
:INPUT DROP [0:0]
:HC - [0:0]
-A INPUT -j HC
-A HC -m addrtype --dst-type LOCAL -p tcp --dport 10256 -j ACCEPT
COMMIT
`)
	tr.SetLocalAddrs(addr("192.0.2.10"))
	ok, _ := tr.Trace(Flow{Origin: External, Src: addr("192.0.2.1"), Proto: "tcp", Dst: addr("192.0.2.10"), Port: 10256, DstLocal: true})
	bad, _ := tr.Trace(Flow{Origin: External, Src: addr("192.0.2.1"), Proto: "tcp", Dst: addr("192.0.2.10"), Port: 22, DstLocal: true})
	fwd, _ := tr.Trace(Flow{Origin: External, Src: addr("192.0.2.1"), Proto: "tcp", Dst: addr("192.0.2.99"), Port: 22})
	if !slices.Equal(ok.Verdicts(), []Verdict{Accept}) || !ok.Outcomes[0].Local {
		t.Errorf("health port: %v", ok)
	}
	if !slices.Equal(bad.Verdicts(), []Verdict{Drop}) {
		t.Errorf("other port should hit the DROP policy: %v", bad)
	}
	if !slices.Equal(fwd.Verdicts(), []Verdict{Accept}) || fwd.Outcomes[0].Local {
		t.Errorf("forwarded packet: %v", fwd)
	}
}

func TestRecentAffinityBranches(t *testing.T) {
	tr := mustParse(t, `*nat
:S - [0:0]
:E1 - [0:0]
:E2 - [0:0]
-A PREROUTING -j S
-A S -m recent --name E1 --rcheck --seconds 60 --reap -j E1
-A S -m recent --name E2 --rcheck --seconds 60 --reap -j E2
-A S -m statistic --mode random --probability 0.5 -j E1
-A S -j E2
-A E1 -m recent --name E1 --set -p udp -j DNAT --to-destination 10.1.0.1:53
-A E2 -m recent --name E2 --set -p udp -j DNAT --to-destination 10.1.0.2:53
COMMIT
`)
	res, err := tr.Trace(Flow{Origin: External, Src: addr("10.9.0.1"), Proto: "udp", Dst: addr("10.0.0.53"), Port: 53})
	if err != nil {
		t.Fatal(err)
	}
	aff, fresh := 0, 0.0
	for _, o := range res.Outcomes {
		if len(o.RecentSet) != 1 {
			t.Fatalf("each path must record the client exactly once: %v", o.RecentSet)
		}
		if o.Affinity {
			aff++
			if !slices.Equal(o.RecentChecked, o.RecentSet) {
				t.Errorf("remembered client checked %v but recorded in %v", o.RecentChecked, o.RecentSet)
			}
		} else {
			fresh += o.Probability
		}
	}
	if aff != 2 || math.Abs(fresh-1) > 1e-9 {
		t.Fatalf("affinity paths %d (want 2), fresh probability %.3f (want 1)\n%s", aff, fresh, res.Explain())
	}
}

func TestNoflushLayering(t *testing.T) {
	base := "*nat\n:A - [0:0]\n:B - [0:0]\n-A OUTPUT -j A\n-A A -j B\n-A B -p tcp -j DNAT --to-destination 10.0.0.1:1\nCOMMIT\n"
	// Re-declaring A flushes it; B is then unreferenced and can be deleted.
	delta := "*nat\n:A - [0:0]\n:B - [0:0]\n:C - [0:0]\n-A A -j C\n-A C -p tcp -j DNAT --to-destination 10.0.0.2:2\n-X B\nCOMMIT\n"
	tr := mustParse(t, base, delta)
	if got := tr.Chains("nat"); slices.Contains(got, "B") || !slices.Contains(got, "C") {
		t.Fatalf("chains after layering: %v", got)
	}
	res, _ := tr.Trace(Flow{Origin: Node, Src: addr("10.0.0.9"), Proto: "tcp", Dst: addr("10.0.0.100"), Port: 5})
	if got := res.Endpoints(); !slices.Equal(got, []string{"10.0.0.2:2"}) {
		t.Fatalf("endpoints %v", got)
	}
	// Deleting a chain still referenced must fail like iptables-restore.
	_, err := Parse(base, "*nat\n:B - [0:0]\n-X B\nCOMMIT\n")
	if err == nil || !strings.Contains(err.Error(), `jumps to "B"`) {
		t.Fatalf("deleting a referenced chain: %v", err)
	}
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Doc != 2 {
		t.Fatalf("error should point at document 2: %v", err)
	}
}

func TestTraceRejectsBadFlows(t *testing.T) {
	tr := mustParse(t, sample)
	for _, f := range []Flow{
		{Src: addr("10.0.0.1"), Proto: "tcp", Port: 80},
		{Src: addr("10.0.0.1"), Dst: addr("fd00::1"), Proto: "tcp", Port: 80},
		{Src: addr("fd00::2"), Dst: addr("fd00::1"), Proto: "tcp", Port: 80},
		{Src: addr("10.0.0.1"), Dst: addr("10.0.0.2"), Proto: "icmp", Port: 80},
		{Src: addr("10.0.0.1"), Dst: addr("10.0.0.2"), Proto: "tcp"},
		{Origin: Origin(9), Src: addr("10.0.0.1"), Dst: addr("10.0.0.2"), Proto: "tcp", Port: 1},
	} {
		if _, err := tr.Trace(f); err == nil {
			t.Errorf("Trace(%v) accepted a bad flow", f)
		}
	}
}

func TestQuotedCommentsAndDump(t *testing.T) {
	tr := mustParse(t, sample)
	if c := tr.Comments("nat", "EP1"); len(c) != 1 || c[0] != "ns/a -> 1" {
		t.Fatalf("comments %q", c)
	}
	if !strings.Contains(tr.Dump(), `"ns/a -> 1"`) {
		t.Fatalf("dump lost the quoting:\n%s", tr.Dump())
	}
}
