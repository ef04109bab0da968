package controller

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/informer"
	"github.com/herald-lb/herald/controller/allocator"
	"github.com/herald-lb/herald/internal/lbapi"
)

// item is a unit of work: the configuration, or one Service.
type item struct {
	config          bool
	namespace, name string
}

var configItem = item{config: true}

// Controller assigns IPs to LoadBalancer Services. One goroutine at a
// time may change the allocator's pools (the config item); Services are
// reconciled by several workers, which the allocator's lock serializes
// where it matters.
type Controller struct {
	opts    Options
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	rec     record.EventRecorder
	metrics *Metrics
	log     *slog.Logger
	alloc   *allocator.Allocator

	kubeInformers   informers.SharedInformerFactory
	secretInformers informers.SharedInformerFactory
	dynInformers    dynamicinformer.DynamicSharedInformerFactory
	services        corelisters.ServiceLister
	namespaces      corelisters.NamespaceLister
	secrets         corelisters.SecretLister
	// cfg lists the configuration objects, by kind.
	cfg     map[string]cache.GenericLister
	indexer map[string]cache.Indexer // for tests, by kind and "Service", "Namespace", "Secret"
	synced  []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[item]

	mu sync.Mutex
	// failing maps Services whose last allocation failed to the message
	// reported, so a repeated failure is not reported again, and so they
	// are retried whenever addresses are freed.
	failing map[allocator.Key]string
	// aliasNoted maps Services that use MetalLB's annotation names to the
	// events last written about it (noteAliases).
	aliasNoted map[allocator.Key]string
	// unadvertised are the pools in force that no advertisement selects.
	unadvertised map[string]bool
	// problems are the parser's findings of the last configuration;
	// reported maps an object ("Kind/name") to the problems already sent
	// as events.
	problems config.Problems
	reported map[string]string
	// objects says which version of each configuration object is in
	// force; passwords are the BGP passwords in force, by peer, for the
	// copy the speakers read.
	objects   map[string]config.ObjectState
	passwords map[string][]byte
	// waitsOnAddresses: a refused pool edit may be accepted once Services
	// free addresses (config.Config.WaitsOnAddresses).
	waitsOnAddresses atomic.Bool

	statusDirty atomic.Bool
	ready       atomic.Bool
	// startup is when leading started, for herald_controller_startup_seconds.
	startup time.Time
}

// New builds a controller over the given clients; Run starts it.
func New(opts Options, kube kubernetes.Interface, dyn dynamic.Interface, rec record.EventRecorder, m *Metrics, log *slog.Logger) *Controller {
	c := &Controller{
		opts: opts, kube: kube, dyn: dyn, rec: rec, metrics: m, log: log,
		alloc:      allocator.New(),
		cfg:        map[string]cache.GenericLister{},
		indexer:    map[string]cache.Indexer{},
		failing:    map[allocator.Key]string{},
		aliasNoted: map[allocator.Key]string{},
		reported:   map[string]string{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[item](),
			workqueue.TypedRateLimitingQueueConfig[item]{Name: ""}),
	}
	strip := informers.WithTransform(stripManagedFields)
	c.kubeInformers = informers.NewSharedInformerFactoryWithOptions(kube, 0, strip)
	c.secretInformers = informers.NewSharedInformerFactoryWithOptions(kube, 0, strip, informers.WithNamespace(opts.Namespace))
	c.dynInformers = dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, opts.Namespace, nil)

	svcInf := c.kubeInformers.Core().V1().Services()
	c.services = svcInf.Lister()
	c.indexer["Service"] = svcInf.Informer().GetIndexer()
	_, _ = svcInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueService,
		UpdateFunc: func(old, obj any) {
			c.enqueueService(obj)
			if o, n := old.(*corev1.Service), obj.(*corev1.Service); !equality.Semantic.DeepEqual(o.Status.LoadBalancer, n.Status.LoadBalancer) {
				c.inUseChanged()
			}
		},
		DeleteFunc: func(obj any) {
			c.enqueueService(obj)
			c.inUseChanged()
		},
	})
	nsInf := c.kubeInformers.Core().V1().Namespaces()
	c.namespaces = nsInf.Lister()
	c.indexer["Namespace"] = nsInf.Informer().GetIndexer()
	_, _ = nsInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueNamespace(obj) },
		UpdateFunc: func(old, obj any) {
			o, n := old.(*corev1.Namespace), obj.(*corev1.Namespace)
			if !maps.Equal(o.Labels, n.Labels) {
				c.enqueueNamespace(obj)
			}
		},
	})
	secInf := c.secretInformers.Core().V1().Secrets()
	c.secrets = secInf.Lister()
	c.indexer["Secret"] = secInf.Informer().GetIndexer()
	_, _ = secInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.queue.Add(configItem) },
		UpdateFunc: func(old, obj any) {
			if !maps.EqualFunc(old.(*corev1.Secret).Data, obj.(*corev1.Secret).Data, func(a, b []byte) bool { return string(a) == string(b) }) {
				c.queue.Add(configItem)
			}
		},
		DeleteFunc: func(any) { c.queue.Add(configItem) },
	})
	c.synced = append(c.synced, svcInf.Informer().HasSynced, nsInf.Informer().HasSynced, secInf.Informer().HasSynced)

	for _, k := range informer.Kinds {
		inf := c.dynInformers.ForResource(informer.GVR(k.Resource))
		c.cfg[k.Kind] = inf.Lister()
		c.indexer[k.Kind] = inf.Informer().GetIndexer()
		_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { c.queue.Add(configItem) },
			UpdateFunc: func(old, obj any) {
				// Status writes (ours) do not change the configuration;
				// they only need checking against what we would write.
				if specChanged(old, obj) {
					c.queue.Add(configItem)
				}
				c.statusDirty.Store(true)
			},
			DeleteFunc: func(any) { c.queue.Add(configItem) },
		})
		c.synced = append(c.synced, inf.Informer().HasSynced)
	}
	return c
}

// specChanged tells whether an update of a configuration object may
// change the parsed configuration: spec (generation), labels (selectors
// match pools by label) or deletion.
func specChanged(old, obj any) bool {
	o, ok1 := old.(*unstructured.Unstructured)
	n, ok2 := obj.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return true
	}
	oc, nc := o.GetCreationTimestamp(), n.GetCreationTimestamp()
	return o.GetGeneration() != n.GetGeneration() || !maps.Equal(o.GetLabels(), n.GetLabels()) ||
		!oc.Equal(&nc) || (o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) ||
		!equality.Semantic.DeepEqual(inForceOf(o), inForceOf(n))
}

// inForceOf is an object's status.inForce: the version the parser falls
// back to, so a change of it is a change of the configuration.
func inForceOf(u *unstructured.Unstructured) any {
	v, _, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "inForce")
	return v
}

// stripManagedFields drops managedFields from cached objects: the
// controller never reads them, and with many Services they are most of
// the cache's memory.
func stripManagedFields(obj any) (any, error) {
	if a, err := apimeta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

func (c *Controller) enqueueService(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if s, ok := obj.(*corev1.Service); ok {
		c.queue.Add(item{namespace: s.Namespace, name: s.Name})
	}
}

// inUseChanged re-parses the configuration when a Service's addresses
// changed while an edit is refused: a pool edit refused because it drops
// addresses in use is accepted once no Service holds them.
func (c *Controller) inUseChanged() {
	if c.waitsOnAddresses.Load() {
		c.queue.Add(configItem)
	}
}

// enqueueNamespace queues the namespace's Services: its labels decide
// which pools' namespaceSelectors admit them.
func (c *Controller) enqueueNamespace(obj any) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return
	}
	svcs, _ := c.services.Services(ns.Name).List(labels.Everything())
	for _, s := range svcs {
		c.queue.Add(item{namespace: s.Namespace, name: s.Name})
	}
}

// enqueueAll queues every Service, oldest first.
func (c *Controller) enqueueAll() {
	svcs, _ := c.services.List(labels.Everything())
	sortOldestFirst(svcs)
	for _, s := range svcs {
		c.queue.Add(item{namespace: s.Namespace, name: s.Name})
	}
}

// sortOldestFirst orders Services by creation, then by key, so the order
// in which Services compete for addresses is repeatable and the older
// Service wins.
func sortOldestFirst(svcs []*corev1.Service) {
	slices.SortFunc(svcs, func(a, b *corev1.Service) int {
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			if a.CreationTimestamp.Before(&b.CreationTimestamp) {
				return -1
			}
			return 1
		}
		return keyOf(a).Compare(keyOf(b))
	})
}

// assignInOrder assigns the handled Services among svcs, oldest first,
// in memory only; the workers then write the outcome (and report
// failures, which Assign repeats). Workers running in parallel would
// otherwise decide which of two competing Services gets an address.
func (c *Controller) assignInOrder(svcs []*corev1.Service) {
	sortOldestFirst(svcs)
	for _, s := range svcs {
		if !lbapi.Handles(s, c.opts.LBClass) {
			continue
		}
		if req, err := Request(s, c.nsLabels(s.Namespace)); err == nil {
			_, _ = c.alloc.Assign(req)
		}
	}
}

// retryFailing gives the Services whose allocation failed another
// chance, oldest first: addresses were freed.
func (c *Controller) retryFailing() {
	c.mu.Lock()
	keys := slices.Collect(maps.Keys(c.failing))
	c.mu.Unlock()
	var svcs []*corev1.Service
	for _, k := range keys {
		if s, err := c.services.Services(k.Namespace).Get(k.Name); err == nil {
			svcs = append(svcs, s)
		}
	}
	c.assignInOrder(svcs)
	for _, s := range svcs {
		c.queue.Add(item{namespace: s.Namespace, name: s.Name})
	}
}

// Ready tells whether the controller has adopted the existing IPs and
// assigns new ones.
func (c *Controller) Ready() bool { return c.ready.Load() }

// Run starts the informers, waits for their caches, parses the
// configuration, adopts every Service's IPs from its status (oldest
// first) and only then starts assigning. It returns when ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.startup = time.Now()
	defer c.queue.ShutDown()
	// The speakers cannot form their cluster without this Secret; it does
	// not depend on the caches, so it goes first.
	go ensureMemberlistSecretLoop(ctx, c.kube, c.opts.Namespace, c.log)
	c.kubeInformers.Start(ctx.Done())
	c.secretInformers.Start(ctx.Done())
	c.dynInformers.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("informer caches did not sync")
	}
	c.log.Info("caches synced", "after", time.Since(c.startup).Round(time.Millisecond))
	c.Start()
	var wg sync.WaitGroup
	for range c.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.processNext(ctx) {
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.statusLoop(ctx)
	}()
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// Start does what must happen before any assignment, on synced caches:
// parse the configuration, then adopt the IPs in Services' status.
func (c *Controller) Start() {
	start := time.Now()
	c.applyConfig()
	n, conflicts := c.adopt()
	svcs, _ := c.services.List(labels.Everything())
	c.assignInOrder(slices.Clone(svcs))
	c.enqueueAll()
	c.ready.Store(true)
	c.metrics.adopted.Set(float64(n))
	if !c.startup.IsZero() {
		c.metrics.startup.Set(time.Since(c.startup).Seconds())
	}
	c.log.Info("ready: adopted the IPs of existing Services", "services", n, "conflicts", conflicts,
		"adoptTook", time.Since(start).Round(time.Millisecond), "sinceStart", time.Since(c.startup).Round(time.Millisecond))
}

// processNext handles one item; false when the queue is shut down.
func (c *Controller) processNext(ctx context.Context) bool {
	it, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(it)
	start := time.Now()
	var err error
	kind := "service"
	if it.config {
		kind = "config"
		c.syncConfig()
	} else {
		err = c.syncService(ctx, it.namespace, it.name)
	}
	c.metrics.reconcile.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	if err != nil {
		c.log.Warn("reconcile failed; retrying", "service", it.namespace+"/"+it.name, "err", err)
		c.queue.AddRateLimited(it)
		return true
	}
	c.queue.Forget(it)
	return true
}

// nsLabels returns the labels of a namespace (none if it is unknown).
func (c *Controller) nsLabels(ns string) map[string]string {
	n, err := c.namespaces.Get(ns)
	if err != nil {
		return nil
	}
	return n.Labels
}

func serviceRef(k allocator.Key) *corev1.Service {
	return &corev1.Service{ObjectMeta: metaFor(k)}
}

func describeIPs(a allocator.Assignment) string {
	return ipList(a.IPs) + " from pool " + a.Pool
}
