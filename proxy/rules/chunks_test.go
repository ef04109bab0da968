package rules_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/herald-lb/herald/proxy/internal/tracer"
	"github.com/herald-lb/herald/proxy/iptables"
	"github.com/herald-lb/herald/proxy/rules"
)

// chunkState is states' after, plus plain Services so that chunks hold
// several Services.
func chunkStates(l lab) (before, after state) {
	before, after, _ = states(l)
	extra, extraEps := benchState(6, 2)
	before.svcs = append(slices.Clone(before.svcs), extra...)
	after.svcs = append(slices.Clone(after.svcs), extra...)
	for _, s := range extra {
		e := extraEps[s.ID()]
		before.eps[s.ID()] = e
		after.eps[s.ID()] = e[:1] // each loses an endpoint
	}
	return before, after
}

// flows are the connections a check follows: each Service's cluster IP
// from a pod, its NodePort and LB IPs from off-cluster clients.
func flows(l lab, svcs []rules.Service) []tracer.Flow {
	var out []tracer.Flow
	for _, s := range svcs {
		out = append(out, tracer.Flow{Origin: tracer.Pod, Src: l.podA, Proto: "tcp", Dst: s.ClusterIPs[0], Port: uint16(s.Port)})
		for _, src := range []netip.Addr{l.client, l.client2} {
			if s.NodePort != 0 {
				out = append(out, tracer.Flow{Origin: tracer.External, Src: src, Proto: "tcp", Dst: l.nodeIP, Port: uint16(s.NodePort), DstLocal: true})
			}
			for _, in := range s.LoadBalancerIngress {
				out = append(out, tracer.Flow{Origin: tracer.External, Src: src, Proto: "tcp", Dst: in.IP, Port: uint16(s.Port)})
			}
		}
	}
	return out
}

// outcomes traces every flow through the restore inputs applied in
// order, as one string per flow.
func outcomes(t *testing.T, l lab, fl []tracer.Flow, docs ...string) []string {
	t.Helper()
	tr, err := tracer.Parse(docs...)
	if err != nil {
		t.Fatalf("restore inputs do not apply: %v", err)
	}
	tr.SetLocalAddrs(l.nodeIP)
	out := make([]string, len(fl))
	for i, f := range fl {
		res, err := tr.Trace(f)
		if err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		var o []string
		for _, x := range res.Outcomes {
			o = append(o, x.String())
		}
		slices.Sort(o)
		out[i] = strings.Join(o, " | ")
	}
	return out
}

// works: every way the flow goes ends at an endpoint.
func works(outcome string) bool {
	for o := range strings.SplitSeq(outcome, " | ") {
		if !strings.HasPrefix(o, "ACCEPT dnat ") {
			return false
		}
	}
	return outcome != ""
}

func TestNATChunks(t *testing.T) {
	for _, l := range []lab{lab4} { // states is IPv4
		before, after := chunkStates(l)
		node := l.node()
		full1 := rules.RenderWith(l.family, before.svcs, before.eps, node, rules.Options{ChunkChains: -1})
		one := rules.RenderWith(l.family, after.svcs, after.eps, node, rules.Options{Existing: full1.NATChains, ChunkChains: -1})
		if len(one.NATChunks) != 0 || len(one.NAT) == 0 {
			t.Fatalf("ChunkChains -1 chunked")
		}
		if def := rules.RenderWith(l.family, after.svcs, after.eps, node, rules.Options{Existing: full1.NATChains}); !bytes.Equal(def.NAT, one.NAT) || len(def.NATChunks) != 0 {
			t.Fatalf("%v: a render below DefaultChunkChains differs from one never chunked", l.family)
		}
		all := append(slices.Clone(before.svcs), after.svcs...)
		fl := flows(l, all)
		start := []string{string(full1.Bytes()), rules.JumpsText()}
		was := outcomes(t, l, fl, start...)
		want := outcomes(t, l, fl, append(start, string(one.Bytes()))...)
		wantDump := parseDump(t, append(start, string(one.Bytes()))...)

		for _, limit := range []int{1, 5, 12} {
			name := fmt.Sprintf("%v/ChunkChains=%d", l.family, limit)
			rs := rules.RenderWith(l.family, after.svcs, after.eps, node, rules.Options{Existing: full1.NATChains, ChunkChains: limit})
			if len(rs.NAT) != 0 || len(rs.NATChunks) < 3 {
				t.Fatalf("%s: NAT %d bytes, %d chunks; want chunks only", name, len(rs.NAT), len(rs.NATChunks))
			}
			if !slices.Equal(rs.NATChains, one.NATChains) || !slices.Equal(rs.Deleted, one.Deleted) || rs.Stats != one.Stats ||
				!slices.Equal(rs.Health, one.Health) || !bytes.Equal(rs.Filter, one.Filter) {
				t.Errorf("%s: chunking changed what the render reports", name)
			}
			checkChunkLayout(t, name, rs, limit)

			// Applied in order, each chunk restores (the Fake checks
			// every jump), and a flow that worked before still works,
			// the old way or the new one.
			ipt := iptables.NewFake()
			for _, in := range start {
				if err := ipt.Restore(context.Background(), []byte(in)); err != nil {
					t.Fatal(err)
				}
			}
			docs := slices.Clone(start)
			for i, in := range rs.Inputs() {
				if err := ipt.Restore(context.Background(), in); err != nil {
					t.Fatalf("%s: input %d of %d: %v\n%s", name, i+1, len(rs.Inputs()), err, in)
				}
				docs = append(docs, string(in))
				got := outcomes(t, l, fl, docs...)
				for j, f := range fl {
					if works(was[j]) && got[j] != was[j] && got[j] != want[j] {
						t.Errorf("%s: after input %d of %d, %v goes %q; before the sync %q, after it %q",
							name, i+1, len(rs.Inputs()), f, got[j], was[j], want[j])
					}
				}
			}
			// The end state is the single restore's.
			ref := iptables.NewFake()
			for _, in := range append(start, string(one.Bytes())) {
				if err := ref.Restore(context.Background(), []byte(in)); err != nil {
					t.Fatal(err)
				}
			}
			for _, table := range []string{"nat", "filter"} {
				got, _ := ipt.Save(context.Background(), table)
				ref, _ := ref.Save(context.Background(), table)
				if !bytes.Equal(got, ref) {
					t.Errorf("%s: %s table after the chunks differs from one restore\n--- chunks\n%s\n--- one\n%s", name, table, got, ref)
				}
			}
			// Bytes, every chunk in one input, ends the same.
			if got := parseDump(t, append(start, string(rs.Bytes()))...); got != wantDump {
				t.Errorf("%s: Bytes() applied at once differs from NAT", name)
			}
		}
	}
}

// checkChunkLayout checks what makes chunks safe to apply one by one:
// the helper chains first, then whole Services whose jumps stay inside
// their chunk (or go to a helper chain), then the dispatch chains and
// the deletions.
func checkChunkLayout(t *testing.T, name string, rs rules.Ruleset, limit int) {
	t.Helper()
	chunks := rs.NATChunks
	first, last := chunkChains(t, chunks[0]), chunkChains(t, chunks[len(chunks)-1])
	if want := []string{rules.ChainMarkMasq, rules.ChainPostrouting}; !slices.Equal(first, want) {
		t.Errorf("%s: first chunk declares %v, want %v", name, first, want)
	}
	wantLast := append([]string{rules.ChainNodePorts, rules.ChainServices}, rs.Deleted...)
	slices.Sort(wantLast)
	if !slices.Equal(last, wantLast) {
		t.Errorf("%s: last chunk declares %v, want %v", name, last, wantLast)
	}
	seen := map[string]int{}
	for i, c := range chunks[1 : len(chunks)-1] {
		decl := chunkChains(t, c)
		if limit == 1 {
			// One Service per chunk: its SVC, SVL, EXT and FW chains share
			// a hash (SEP chains are reached through them).
			hashes := map[string]bool{}
			for _, d := range decl {
				if !strings.HasPrefix(d, rules.PrefixEndpoint) {
					hashes[d[strings.LastIndex(d, "-")+1:]] = true
				}
			}
			if len(hashes) != 1 {
				t.Errorf("%s: chunk %d holds %d Services, want 1: %v", name, i+2, len(hashes), decl)
			}
		}
		for _, d := range decl {
			if !rules.IsServiceChain(d) {
				t.Errorf("%s: Service chunk %d declares %s", name, i+2, d)
			}
			seen[d]++
		}
		for l, err := range iptables.Lines(c) {
			if err != nil {
				t.Fatal(err)
			}
			if l.Kind != iptables.LineRule {
				continue
			}
			if !slices.Contains(decl, string(l.Name)) {
				t.Errorf("%s: chunk %d writes to %s, declared elsewhere", name, i+2, l.Name)
			}
			args, _ := l.Args()
			if j := slices.Index(args, "-j"); j >= 0 {
				tgt := args[j+1]
				if strings.HasPrefix(tgt, "HERALD-") && tgt != rules.ChainMarkMasq && !slices.Contains(decl, tgt) {
					t.Errorf("%s: chunk %d jumps from %s to %s, outside the chunk", name, i+2, l.Name, tgt)
				}
			}
		}
	}
	for _, c := range rs.NATChains {
		if seen[c] != 1 {
			t.Errorf("%s: chain %s declared in %d Service chunks, want 1", name, c, seen[c])
		}
	}
	if len(seen) != len(rs.NATChains) {
		t.Errorf("%s: Service chunks declare %d chains, the render uses %d", name, len(seen), len(rs.NATChains))
	}
}

func chunkChains(t *testing.T, in []byte) []string {
	t.Helper()
	var out []string
	for l, err := range iptables.Lines(in) {
		if err != nil {
			t.Fatal(err)
		}
		if l.Kind == iptables.LineChain {
			out = append(out, string(l.Name))
		}
	}
	return out
}
