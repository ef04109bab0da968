package speaker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/herald-lb/herald/speaker/view"
)

// Issue #19: the ServiceAnnouncement objects and writes a whole cluster
// of speakers makes, measured: N real speakers (Speaker.Sync) with their
// real AnnouncementWriters on one fake API (client-go's dynamic fake,
// a reactor counting requests by verb), all watching through one shared
// informer (the real speakers have one each; what is written does not
// depend on it).

// apiSizes are (nodes, Services) simulated; objects and writes grow
// linearly with the Services, so docs/scale.md scales them to 10,000.
func apiSizes() [][2]int {
	if os.Getenv("HERALD_BENCH_SCALE") == "1" {
		return [][2]int{{10, 1000}, {100, 1000}, {1000, 1000}}
	}
	return [][2]int{{10, 1000}}
}

// apiCluster is the simulated cluster.
type apiCluster struct {
	dyn      *dynamicfake.FakeDynamicClient
	inf      cache.SharedIndexInformer
	nodeInf  cache.SharedIndexInformer
	speakers []*scaleWorld
	// writers write the ServiceAnnouncements and (BGP) NodeAnnouncements.
	writers []*StatusWriter
	src     *fakeSource
	mu      sync.Mutex
	verbs   map[string]int
	writes  int64
	// seen counts the informer's events.
	seen atomic.Int64
}

func newAPICluster(ctx context.Context, n, svcs int, useBGP bool, policy string) *apiCluster {
	c := &apiCluster{verbs: map[string]int{}}
	c.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{AnnouncementGVR: "ServiceAnnouncementList", NodeAnnouncementGVR: "NodeAnnouncementList"})
	c.dyn.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if r := a.GetResource().Resource; r != AnnouncementGVR.Resource && r != NodeAnnouncementGVR.Resource {
			return false, nil, nil
		}
		switch a.GetVerb() {
		case "create", "update", "delete", "patch":
			c.mu.Lock()
			c.verbs[a.GetVerb()]++
			c.writes++
			writes := c.writes
			c.mu.Unlock()
			// Let the informer drain the fake's watch, whose buffer
			// holds 100 events (a refused write makes none: the wait
			// is bounded).
			for i := 0; i < 200 && writes-c.seen.Load() > 50; i++ {
				time.Sleep(time.Millisecond)
			}
		}
		return false, nil, nil
	})
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(c.dyn, 0, "herald-system", nil)
	c.inf = f.ForResource(AnnouncementGVR).Informer()
	c.nodeInf = f.ForResource(NodeAnnouncementGVR).Informer()
	for _, inf := range []cache.SharedIndexInformer{c.inf, c.nodeInf} {
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.seen.Add(1) },
			UpdateFunc: func(_, _ any) { c.seen.Add(1) },
			DeleteFunc: func(any) { c.seen.Add(1) },
		})
	}
	src := &fakeSource{snap: scaleSnapshot(n, svcs, useBGP, policy)}
	c.src = src
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	noOwner := func(view.ServiceRef) types.UID { return "" }
	for i := range n {
		sc := StatusConfig{Node: scaleNode(i), Namespace: "herald-system", Dynamic: c.dyn, Services: c.inf, Owner: noOwner, Log: log}
		if useBGP {
			sc.Nodes = c.nodeInf
		}
		w := NewStatusWriter(sc)
		c.writers = append(c.writers, w)
		c.speakers = append(c.speakers, newScaleSpeaker(src, scaleNode(i), n, useBGP, w))
	}
	f.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), c.inf.HasSynced, c.nodeInf.HasSynced)
	return c
}

// take returns and resets the request counts.
func (c *apiCluster) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.verbs
	c.verbs = map[string]int{}
	return out
}

// objects counts the objects of a kind in the API.
func (c *apiCluster) objects(ctx context.Context, gvr schema.GroupVersionResource) int {
	l, err := c.dyn.Resource(gvr).Namespace("herald-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		panic(err)
	}
	return len(l.Items)
}

// drain reconciles what queue holds, reporting whether it held anything.
func drain(ctx context.Context, queue interface {
	Len() int
	Get() (string, bool)
	Done(string)
	Forget(string)
}, reconcile func(context.Context, string) error) bool {
	busy := false
	for queue.Len() > 0 {
		busy = true
		name, _ := queue.Get()
		if err := reconcile(ctx, name); err != nil {
			panic(err)
		}
		queue.Done(name)
		queue.Forget(name)
	}
	return busy
}

// round syncs the live speakers, then writes until every writer's queue
// stays empty with the informer caught up with the API.
func (c *apiCluster) round(ctx context.Context, live []bool) {
	for i, s := range c.speakers {
		if live[i] {
			s.sp.Sync()
		}
	}
	for quiet := 0; quiet < 3; {
		busy := false
		for i, w := range c.writers {
			if live[i] && drain(ctx, w.svc.queue, w.svc.reconcile) {
				busy = true
			}
			if live[i] && w.node != nil && drain(ctx, w.node.queue, w.node.reconcile) {
				busy = true
			}
		}
		if busy || len(c.inf.GetStore().List()) != c.objects(ctx, AnnouncementGVR) ||
			len(c.nodeInf.GetStore().List()) != c.objects(ctx, NodeAnnouncementGVR) {
			quiet = 0
		} else {
			quiet++
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkAnnouncementsAPI reports, per protocol and traffic policy,
// the ServiceAnnouncements in the API once every speaker has synced
// (svc-objects: ServiceAnnouncements, node-objects: NodeAnnouncements)
// and the requests (create, update, delete) of: the start of the
// cluster, a sync round with nothing changed (steady state; the speakers
// sync every 30 s), one Service created (newsvc), a node failing
// (memberlist drops it), and one speaker restarting (a DaemonSet rolling
// update does it N times).
func BenchmarkAnnouncementsAPI(b *testing.B) {
	cases := []struct {
		proto, policy string
	}{{"layer2", policyCluster}, {"layer2", policyLocal}, {"bgp", policyCluster}, {"bgp", policyLocal}}
	for _, size := range apiSizes() {
		n, svcs := size[0], size[1]
		for _, tc := range cases {
			b.Run(fmt.Sprintf("%s/%s/nodes=%d/services=%d", tc.proto, tc.policy, n, svcs), func(b *testing.B) {
				for range b.N {
					ctx, cancel := context.WithCancel(context.Background())
					c := newAPICluster(ctx, n, svcs, tc.proto == "bgp", tc.policy)
					live := make([]bool, n)
					for i := range live {
						live[i] = true
					}
					report := func(what string, v map[string]int) {
						for _, verb := range []string{"create", "update", "delete"} {
							b.ReportMetric(float64(v[verb]), what+"-"+verb+"s")
						}
					}
					c.round(ctx, live)
					report("start", c.take())
					b.ReportMetric(float64(c.objects(ctx, AnnouncementGVR)), "svc-objects")
					b.ReportMetric(float64(c.objects(ctx, NodeAnnouncementGVR)), "node-objects")
					c.round(ctx, live)
					report("steady", c.take())
					// One more Service, with endpoints on three nodes.
					c.src.mu.Lock()
					extra := c.src.snap.Services[0]
					extra.Name, extra.IPs = "svc-new", []netip.Addr{scaleIP(svcs + 1)}
					c.src.snap.Services = append(c.src.snap.Services, extra)
					c.src.mu.Unlock()
					c.round(ctx, live)
					report("newsvc", c.take())
					// node-0001 fails: the others' memberlist drops it.
					dead := 1
					live[dead] = false
					for i, s := range c.speakers {
						if i != dead {
							s.cluster.Remove(scaleNode(dead))
						}
					}
					c.round(ctx, live)
					report("failure", c.take())
					// node-0002's speaker restarts: it deletes its own
					// objects on the way out, the next one writes them.
					r := 2
					if err := c.writers[r].DeleteOwn(ctx); err != nil {
						b.Fatal(err)
					}
					c.round(ctx, live)
					report("restart", c.take())
					cancel()
				}
			})
		}
	}
}
