package proxy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/herald-lb/herald/proxy/internal/tracer"
	"github.com/herald-lb/herald/proxy/rules"
)

// TestSyncChunkedFullSync: a full sync of a nat table larger than
// ChunkChains takes several restores; when one in the middle fails, the
// Services programmed before still work, and the full sync that follows
// ends where a syncer that never chunked (nor failed) ends, stale chains
// of the interrupted sync included.
func TestSyncChunkedFullSync(t *testing.T) {
	chunked, ref := newEnv(t), newEnv(t)
	chunked.s.fams[0].w.(*iptablesFamily).chunkChains = 3
	ref.s.fams[0].w.(*iptablesFamily).chunkChains = -1
	clock := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	chunked.s.now = func() time.Time { return clock }
	both := func(f func(e *env)) { f(chunked); f(ref) }
	addSvc := func(name string, i int, eps ...ep) {
		both(func(e *env) {
			e.tracker.UpdateService(clusterIPService("shop", name, fmt.Sprintf("10.96.1.%d", i)))
			e.tracker.UpdateSlice(slice("shop", name, name+"-1", 8080, "http", corev1.ProtocolTCP, eps...))
		})
	}
	for i := range 6 {
		addSvc(fmt.Sprintf("s%d", i), i, ep{fmt.Sprintf("10.244.1.%d", i), testNode, true}, ep{fmt.Sprintf("10.244.2.%d", i), otherNode, true})
	}
	res := chunked.sync(false)
	fr := res.Families[0]
	if fr.Err != nil || !fr.Full || fr.Chunks < 4 || fr.Chunks != len(chunked.ipt.Restores) {
		t.Fatalf("first sync: err %v full %v, %d chunks, %d restores", fr.Err, fr.Full, fr.Chunks, len(chunked.ipt.Restores))
	}
	n := 0
	for _, in := range chunked.ipt.Restores {
		n += len(in)
	}
	if fr.Bytes != n {
		t.Errorf("Bytes %d, the restores had %d", fr.Bytes, n)
	}
	ref.sync(false)
	if got, want := chunked.save("nat"), ref.save("nat"); got != want {
		t.Fatalf("chunked nat table differs from one restore's\n--- chunked\n%s\n--- one\n%s", got, want)
	}
	dispatch := strings.Join(chunked.ipt.Rules("nat", rules.ChainServices), "\n")

	// The next full sync fails at its third input, after the filter
	// table, the helper chains and the first Service chunk: that of a
	// new Service "a", which sorts first.
	addSvc("a", 100, ep{"10.244.1.100", testNode, true})
	both(func(e *env) {
		e.tracker.DeleteService("shop", "s0")
		e.tracker.UpdateSlice(slice("shop", "s1", "s1-1", 8080, "http", corev1.ProtocolTCP, ep{"10.244.2.77", otherNode, true}))
	})
	calls := 0
	chunked.ipt.FailIf = func([]byte) error {
		if calls++; calls == 3 {
			return errors.New("iptables-restore: line 9 failed")
		}
		return nil
	}
	restores := len(chunked.ipt.Restores)
	clock = clock.Add(DefaultFullSyncPeriod)
	res = chunked.sync(true)
	fr = res.Families[0]
	if !fr.Full || fr.Err == nil || !res.Retry || !strings.Contains(fr.Err.Error(), "restore 3 of") {
		t.Fatalf("want a full sync failing at its third restore: full %v retry %v err %v", fr.Full, res.Retry, fr.Err)
	}
	if got := len(chunked.ipt.Restores) - restores; got != 3 {
		t.Errorf("%d restores tried, want 3: none after the failure", got)
	}
	aChain := svcChain("shop", "a", "http", rules.TCP)
	if !strings.Contains(chunked.save("nat"), ":"+aChain+" ") {
		t.Fatalf("the chunk with %s was not applied before the failure: the test misses its point", aChain)
	}
	// The old dispatch is still in charge, and every Service it sends
	// packets to, s1 with its new endpoint already, still works.
	if got := strings.Join(chunked.ipt.Rules("nat", rules.ChainServices), "\n"); got != dispatch {
		t.Errorf("dispatch chain changed by a failed chunked sync:\n%s\nwas\n%s", got, dispatch)
	}
	tr, err := tracer.Parse(chunked.save("filter"), chunked.save("nat"))
	if err != nil {
		t.Fatal(err)
	}
	tr.SetLocalAddrs(testNodeIP)
	for i := range 6 {
		res, err := tr.Trace(tracer.Flow{Origin: tracer.Pod, Src: netip.MustParseAddr("10.244.1.50"), Proto: "tcp", Dst: netip.MustParseAddr(fmt.Sprintf("10.96.1.%d", i)), Port: 80})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Outcomes) == 0 {
			t.Errorf("s%d: no outcome", i)
		}
		for _, o := range res.Outcomes {
			if !o.DNAT || o.Verdict != tracer.Accept {
				t.Errorf("s%d after the failed chunk: %v", i, o)
			}
		}
	}

	// "a" goes away before the retry: the chains the interrupted sync
	// made for it are stale and must go too.
	both(func(e *env) { e.tracker.DeleteService("shop", "a") })
	chunked.ipt.FailIf = nil
	res = chunked.sync(false)
	if fr := res.Families[0]; fr.Err != nil || !fr.Full || fr.Reason != "the previous restore failed" {
		t.Fatalf("retry: %+v", fr)
	}
	if res := ref.sync(false); res.Families[0].Err != nil {
		t.Fatal(res.Families[0].Err)
	}
	if got, want := chunked.save("nat"), ref.save("nat"); got != want {
		t.Errorf("after the retry the nat table differs from one never chunked\n--- chunked\n%s\n--- one\n%s", got, want)
	}
	if got, want := chunked.save("filter"), ref.save("filter"); got != want {
		t.Errorf("after the retry the filter table differs\n--- chunked\n%s\n--- one\n%s", got, want)
	}
}
