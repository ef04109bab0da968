package proxy

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/proxy/nft"
	"github.com/herald-lb/herald/proxy/rules"
)

// fakeNFT records the transactions and takes the table each one was
// computed for as what the kernel holds (Diff's correctness against the
// kernel is TestKernelApply's).
type fakeNFT struct {
	applied []nft.Changes
	table   *nft.Table
	fail    error
	gone    bool
}

func (f *fakeNFT) Apply(_ rules.Family, want *nft.Table, ch nft.Changes) error {
	if f.fail != nil {
		return f.fail
	}
	f.applied = append(f.applied, ch)
	f.table, f.gone = want, false
	return nil
}

func (f *fakeNFT) Exists(rules.Family) (bool, error) { return f.table != nil && !f.gone, nil }

func newNFTEnv(t *testing.T) (*env, *fakeNFT) {
	e := newEnv(t)
	k := &fakeNFT{}
	cfg := Config{NodeName: testNode, ClusterCIDRs: e.s.cfg.ClusterCIDRs, MasqueradeBit: 14}
	e.s = NewSyncer(cfg, e.tracker, []Backend{NFTBackend(rules.IPv4, k)}, e.hc, e.health, e.ct, e.m, nil)
	return e, k
}

// TestSyncNFT: the nftables mode recreates the table on the first sync,
// after a failed transaction and when the table is gone, writes only
// what changed otherwise (one chain and no dispatch chain for an
// endpoint change), rewrites everything on the periodic full resync,
// and never touches iptables.
func TestSyncNFT(t *testing.T) {
	e, k := newNFTEnv(t)
	clock := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	e.s.now = func() time.Time { return clock }
	e.addWebAndDB()
	res := e.sync(false)
	if f := res.Families[0]; !f.Full || f.Reason != "first sync" || f.Err != nil || k.applied[0].Mode != nft.Recreate {
		t.Fatalf("first sync: %+v, %d transactions", f, len(k.applied))
	}
	if len(e.ipt.Restores) != 0 {
		t.Errorf("the nftables mode ran iptables-restore")
	}
	if !e.s.Synced() {
		t.Error("not Synced")
	}
	if res := e.sync(false); !res.Idle || len(k.applied) != 1 {
		t.Fatalf("idle sync: %+v, %d transactions", res, len(k.applied))
	}

	e.tracker.UpdateSlice(slice("shop", "web", "web-1", 8080, "http", corev1.ProtocolTCP, ep{"10.244.1.20", testNode, true}))
	res = e.sync(false)
	ch := k.applied[len(k.applied)-1]
	if res.Families[0].Full || ch.Mode != nft.Partial {
		t.Fatalf("endpoint change: %+v, mode %s", res.Families[0], ch.Mode)
	}
	var rewritten []string
	for _, c := range ch.Rewrite {
		rewritten = append(rewritten, c.Name)
	}
	if len(rewritten) != 1 || !strings.HasPrefix(rewritten[0], rules.NFTPrefixService) || !strings.Contains(rewritten[0], "shop/web/") {
		t.Errorf("an endpoint change rewrote %v, want web's service chain only", rewritten)
	}
	// Without affinity there are no endpoint chains: the gone endpoint
	// leaves the hairpin set.
	if len(ch.DelChains) != 0 || len(ch.DelElements[rules.NFTSetHairpin]) != 1 {
		t.Errorf("the gone endpoint: chains deleted %v, hairpin elements deleted %v", ch.DelChains, ch.DelElements[rules.NFTSetHairpin])
	}
	fresh := rules.RenderNFT(rules.IPv4, e.tracker.Snapshot().Services, e.tracker.Snapshot().Endpoints, e.s.nodeConfig(e.tracker.Node()))
	if k.table.Text() != fresh.Table.Text() {
		t.Error("the table after the partial sync is not a fresh render's")
	}

	// A failed transaction leaves the kernel as it was; the next one
	// recreates the table.
	k.fail = errors.New("netlink: EBUSY")
	e.tracker.UpdateSlice(slice("shop", "db", "db-1", 5432, "http", corev1.ProtocolTCP, ep{"10.244.2.31", otherNode, true}))
	if res := e.sync(false); res.Families[0].Err == nil || !res.Retry {
		t.Fatalf("failed transaction: %+v", res)
	}
	k.fail = nil
	res = e.sync(false)
	if f := res.Families[0]; !f.Full || f.Reason != "the previous restore failed" || k.applied[len(k.applied)-1].Mode != nft.Recreate {
		t.Fatalf("after the failure: %+v", f)
	}

	// Someone flushes the ruleset: the periodic check recreates it.
	k.gone = true
	clock = clock.Add(30 * time.Second)
	res = e.sync(true)
	if f := res.Families[0]; !f.Full || !strings.Contains(f.Reason, "is gone") || k.applied[len(k.applied)-1].Mode != nft.Recreate {
		t.Fatalf("table gone: %+v", f)
	}
	clock = clock.Add(DefaultFullSyncPeriod)
	res = e.sync(true)
	if f := res.Families[0]; !f.Full || f.Reason != "periodic full resync" || k.applied[len(k.applied)-1].Mode != nft.Full {
		t.Fatalf("hourly: %+v, mode %s", f, k.applied[len(k.applied)-1].Mode)
	}
	if h, ok := e.s.Programmed(testNodeIP); !h || ok {
		t.Errorf("Programmed(node IP) = %v, %v: handled, not a VIP", h, ok)
	}
}
