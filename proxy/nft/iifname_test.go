package nft

import (
	"bytes"
	"testing"

	"github.com/google/nftables/expr"

	"github.com/herald-lb/herald/internal/ipfamily"
)

// TestIifname: the text nft prints and the bytes the kernel compares, for
// a whole name (padded to IFNAMSIZ) and a prefix (its bytes only).
func TestIifname(t *testing.T) {
	b := &batch{f: ipfamily.IPv4}
	for _, tc := range []struct {
		m    MatchIifname
		text string
		op   expr.CmpOp
		data []byte
	}{
		{MatchIifname{Name: "cni0"}, `iifname "cni0"`, expr.CmpOpEq, append([]byte("cni0"), make([]byte, 12)...)},
		{MatchIifname{Name: "veth", Prefix: true, Not: true}, `iifname != "veth*"`, expr.CmpOpNeq, []byte("veth")},
	} {
		if got := tc.m.Text(ipfamily.IPv4); got != tc.text {
			t.Errorf("text %q, want %q", got, tc.text)
		}
		out, err := b.rule(Rule{Exprs: []Expr{tc.m}})
		if err != nil {
			t.Fatal(err)
		}
		meta, ok := out[0].(*expr.Meta)
		cmp, ok2 := out[1].(*expr.Cmp)
		if len(out) != 2 || !ok || !ok2 || meta.Key != expr.MetaKeyIIFNAME || cmp.Op != tc.op || !bytes.Equal(cmp.Data, tc.data) {
			t.Errorf("%s: encoded as %#v", tc.text, out)
		}
	}
	for _, bad := range []string{"", "sixteen-letters!"} {
		if _, err := b.rule(Rule{Exprs: []Expr{MatchIifname{Name: bad}}}); err == nil {
			t.Errorf("%q encoded", bad)
		}
	}
}
