package controller

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/internal/lbapi"
)

// Issue #19: the controller with 100,000 addresses and 50,000 Services,
// no API server. Start is what the controller runs once its caches have
// synced: parse the configuration, adopt the addresses in the Services'
// status, assign the rest in memory, queue every Service. The workers'
// status writes, one per Service, are API requests and are counted in
// docs/scale.md, not timed here.

// scaleSizes are (addresses, Services): the size and a tenth of
// it, to show how the cost grows.
var scaleSizes = [][2]int{{10_000, 5_000}, {100_000, 50_000}}

// scaleEnv is a controller over one pool of addrs addresses (from
// 198.18.0.0; 100,000 end at 198.19.134.159) and svcs Services in its
// caches, with their addresses in status when adopted is set.
func scaleEnv(b *testing.B, addrs, svcs int, adopted bool) *env {
	b.Helper()
	e := newEnv(b)
	first := netip.MustParseAddr("198.18.0.0")
	last := first
	for range addrs - 1 {
		last = last.Next()
	}
	e.addPool("big", []string{first.String() + "-" + last.String()})
	e.refresh()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	objs := make([]any, 0, svcs)
	ip := first
	for i := range svcs {
		s := lbService(fmt.Sprintf("ns-%02d", i%50), fmt.Sprintf("svc-%05d", i))
		s.CreationTimestamp = metav1.NewTime(created.Add(time.Duration(i) * time.Second))
		if adopted {
			s.Annotations = map[string]string{lbapi.AnnotationAllocatedFromPool: "big"}
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
			ip = ip.Next().Next()
		}
		objs = append(objs, s)
	}
	e.replace("Service", objs)
	return e
}

// heapInUse is the heap in use after a collection, in MiB.
func heapInUse() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapInuse) / (1 << 20)
}

// BenchmarkControllerStartScale times Start for 50,000 Services over
// 100,000 addresses: "assign" with no address in any status (every
// Service assigned in memory), "adopt" with every Service's address in
// its status (a restarted controller). heap-MiB is the heap in use after
// Start, the Service cache included, as in the running process.
func BenchmarkControllerStartScale(b *testing.B) {
	for _, adopted := range []bool{false, true} {
		name := "assign"
		if adopted {
			name = "adopt"
		}
		for _, size := range scaleSizes {
			addrs, svcs := size[0], size[1]
			b.Run(fmt.Sprintf("%s/services=%d/addrs=%d", name, svcs, addrs), func(b *testing.B) {
				b.ReportAllocs()
				var heap float64
				for range b.N {
					b.StopTimer()
					e := scaleEnv(b, addrs, svcs, adopted)
					b.StartTimer()
					e.c.Start()
					b.StopTimer()
					if n := e.c.queue.Len(); n != svcs {
						b.Fatalf("%d Services queued, want %d", n, svcs)
					}
					if a, ok := e.c.alloc.Lookup(keyOf(objsFirst(e))); !ok || len(a.IPs) != 1 {
						b.Fatalf("the first Service holds %v", a.IPs)
					}
					heap = heapInUse()
					e.c.queue.ShutDown()
					b.StartTimer()
				}
				b.ReportMetric(heap, "heap-MiB")
			})
		}
	}
}

// objsFirst is the first Service in the controller's cache.
func objsFirst(e *env) *corev1.Service {
	s, err := e.c.services.Services("ns-00").Get("svc-00000")
	if err != nil {
		panic(err)
	}
	return s
}
