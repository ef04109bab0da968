package controller

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/controller/allocator"
	"github.com/herald-lb/herald/internal/lbapi"
)

// Event reasons on Services.
const (
	EventIPAllocated      = "IPAllocated"
	EventAllocationFailed = "AllocationFailed"
	EventIPReleased       = "IPReleased"
	// EventAnnotationAlias: the Service uses MetalLB's name for one of
	// herald's annotations (normal), or two names disagree (warning).
	EventAnnotationAlias = "AnnotationAlias"
	// EventPoolNotAdvertised: the Service got IPs from a pool that no
	// advertisement selects, so no node announces them.
	EventPoolNotAdvertised = "PoolNotAdvertised"
)

func metaFor(k allocator.Key) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}
}

func keyOf(svc *corev1.Service) allocator.Key {
	return allocator.Key{Namespace: svc.Namespace, Name: svc.Name}
}

// ipList writes IPs as "192.0.2.1" or "192.0.2.1 and 2001:db8::1".
func ipList(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, " and ")
}

// syncService brings one Service's IPs, status and annotation in line
// with its request.
func (c *Controller) syncService(ctx context.Context, ns, name string) error {
	key := allocator.Key{Namespace: ns, Name: name}
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.forget(key)
		c.mu.Lock()
		delete(c.aliasNoted, key)
		c.mu.Unlock()
		if a, ok := c.alloc.Release(key); ok {
			c.released(serviceRef(key), a, "the Service was deleted")
			c.retryFailing()
		}
		return nil
	}
	if err != nil {
		return err
	}
	if !lbapi.Handles(svc, c.opts.LBClass) {
		return c.releaseService(ctx, svc)
	}

	c.noteAliases(svc)
	req, rerr := Request(svc, c.nsLabels(ns))
	var asg allocator.Assignment
	before, had := c.alloc.Lookup(key)
	if rerr != nil {
		// Bad input never takes working IPs away: keep what it holds.
		asg = before
		c.failed(svc, allocator.ReasonInvalidRequest, rerr.Error(), asg)
	} else {
		var aerr error
		asg, aerr = c.alloc.Assign(req)
		if aerr != nil {
			reason := allocator.ReasonOf(aerr)
			c.failed(svc, reason, aerr.Error(), asg)
		} else {
			c.forget(key)
		}
	}
	if err := c.writeService(ctx, svc, asg); err != nil {
		return err
	}
	// Events follow what the Service shows: new IPs in its status.
	old, _ := lbapi.StatusIPs(svc)
	switch {
	case len(asg.IPs) > 0 && !slices.Equal(old, asg.IPs):
		msg := "Assigned " + describeIPs(asg)
		if len(old) > 0 {
			msg += fmt.Sprintf(" (was %s)", ipList(old))
		}
		c.rec.Event(svc, corev1.EventTypeNormal, EventIPAllocated, msg)
		c.mu.Lock()
		unannounced := c.unadvertised[asg.Pool]
		c.mu.Unlock()
		if unannounced {
			c.rec.Event(svc, corev1.EventTypeWarning, EventPoolNotAdvertised, fmt.Sprintf(
				"no L2Advertisement or BGPAdvertisement selects pool %s, so no node announces %s: add one that names the pool", asg.Pool, ipList(asg.IPs)))
		}
		c.metrics.allocations.Inc()
		c.statusDirty.Store(true)
		if had && !slices.Equal(before.IPs, asg.IPs) {
			c.retryFailing()
		}
	case had && len(asg.IPs) == 0:
		c.released(svc, before, "its request can no longer be met")
		c.retryFailing()
	}
	return nil
}

// noteAliases tells, once per distinct set of messages, that a Service
// uses MetalLB's annotation names (and which name to use instead) or
// sets two names of one annotation to different values.
func (c *Controller) noteAliases(svc *corev1.Service) {
	notes, conflicts := lbapi.AliasNotes(svc)
	key := keyOf(svc)
	said := strings.Join(append(slices.Clone(notes), conflicts...), "\n")
	c.mu.Lock()
	same := c.aliasNoted[key] == said
	if said == "" {
		delete(c.aliasNoted, key)
	} else {
		c.aliasNoted[key] = said
	}
	c.mu.Unlock()
	if same {
		return
	}
	for _, n := range notes {
		c.rec.Event(svc, corev1.EventTypeNormal, EventAnnotationAlias, n)
	}
	for _, m := range conflicts {
		c.rec.Event(svc, corev1.EventTypeWarning, EventAnnotationAlias, m)
	}
}

// failed reports an allocation failure once per distinct message.
func (c *Controller) failed(svc *corev1.Service, reason allocator.Reason, msg string, kept allocator.Assignment) {
	if len(kept.IPs) > 0 {
		msg += fmt.Sprintf("; keeping %s", describeIPs(kept))
	}
	key := keyOf(svc)
	c.mu.Lock()
	same := c.failing[key] == msg
	c.failing[key] = msg
	c.mu.Unlock()
	if same {
		return
	}
	c.rec.Event(svc, corev1.EventTypeWarning, EventAllocationFailed, msg)
	c.metrics.failures.WithLabelValues(reason.String()).Inc()
}

func (c *Controller) forget(key allocator.Key) {
	c.mu.Lock()
	delete(c.failing, key)
	c.mu.Unlock()
}

// released reports freed IPs.
func (c *Controller) released(obj *corev1.Service, a allocator.Assignment, why string) {
	c.rec.Event(obj, corev1.EventTypeNormal, EventIPReleased, fmt.Sprintf("Released %s: %s", describeIPs(a), why))
	c.metrics.releases.Inc()
	c.statusDirty.Store(true)
}

// releaseService handles a Service this controller does not (or no
// longer) assign IPs to: it frees what the Service holds, after removing
// the IPs from its status and the annotation, so they are never handed to
// another Service while this one still shows them.
func (c *Controller) releaseService(ctx context.Context, svc *corev1.Service) error {
	key := keyOf(svc)
	c.forget(key)
	held, had := c.alloc.Lookup(key)
	_, annotated := svc.Annotations[lbapi.AnnotationAllocatedFromPool]
	if !had && !annotated {
		return nil
	}
	ingress := svc.Status.LoadBalancer.Ingress
	if had {
		if ips, _ := lbapi.StatusIPs(svc); len(ips) > 0 && !slices.ContainsFunc(ips, func(ip netip.Addr) bool { return !slices.Contains(held.IPs, ip) }) {
			ingress = nil
		}
	}
	if err := c.patchService(ctx, svc, ingress, ""); err != nil {
		return err
	}
	if !had {
		return nil
	}
	c.alloc.Release(key)
	why := "the Service is no longer of type LoadBalancer"
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		class := "no loadBalancerClass"
		if svc.Spec.LoadBalancerClass != nil {
			class = fmt.Sprintf("loadBalancerClass %q", *svc.Spec.LoadBalancerClass)
		}
		want := "Services without a class"
		if c.opts.LBClass != "" {
			want = fmt.Sprintf("class %q", c.opts.LBClass)
		}
		why = fmt.Sprintf("the Service has %s; this controller handles %s", class, want)
	}
	c.released(svc, held, why)
	c.retryFailing()
	return nil
}

// writeService makes status and annotation show the assignment.
func (c *Controller) writeService(ctx context.Context, svc *corev1.Service, asg allocator.Assignment) error {
	want := Ingress(asg.IPs)
	if sameIngress(svc.Status.LoadBalancer.Ingress, want) && svc.Annotations[lbapi.AnnotationAllocatedFromPool] == asg.Pool {
		return nil
	}
	return c.patchService(ctx, svc, want, asg.Pool)
}

// patchService writes status and annotation in one request to the status
// subresource, which keeps spec but takes metadata changes; if an API
// server ever drops the annotation there, a second patch writes it. When
// only the annotation changes, only metadata is written, so a status
// another controller owns is never rewritten from a stale cache.
func (c *Controller) patchService(ctx context.Context, svc *corev1.Service, ingress []corev1.LoadBalancerIngress, pool string) error {
	sameStatus := sameIngress(svc.Status.LoadBalancer.Ingress, ingress)
	if sameStatus && svc.Annotations[lbapi.AnnotationAllocatedFromPool] == pool {
		return nil
	}
	svcs := c.kube.CoreV1().Services(svc.Namespace)
	if sameStatus {
		_, err := svcs.Patch(ctx, svc.Name, types.MergePatchType, annotationPatch(svc, pool), metav1.PatchOptions{})
		return ignoreGone(err)
	}
	got, err := svcs.Patch(ctx, svc.Name, types.MergePatchType, servicePatch(svc, ingress, pool), metav1.PatchOptions{}, "status")
	if err != nil {
		return ignoreGone(err)
	}
	if v, has := got.Annotations[lbapi.AnnotationAllocatedFromPool]; v != pool || (pool == "" && has) {
		_, err = svcs.Patch(ctx, svc.Name, types.MergePatchType, annotationPatch(svc, pool), metav1.PatchOptions{})
		return ignoreGone(err)
	}
	return nil
}

// ignoreGone drops the error of writing a Service that was deleted: its
// delete event releases the IPs.
func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// syncConfig parses the configuration and hands the pools to the
// allocator. Services whose IPs left every pool are released with an
// event and, with all others, assigned again oldest first and queued, so
// they get new IPs if there are any and Services that failed before are
// tried again.
func (c *Controller) syncConfig() {
	c.applyConfig()
	svcs, _ := c.services.List(labels.Everything())
	c.assignInOrder(slices.Clone(svcs))
	c.enqueueAll()
}

// applyConfig parses the configuration and sets the allocator's pools,
// reporting problems and displaced Services; it assigns nothing.
func (c *Controller) applyConfig() {
	res, readProblems := c.resources()
	cfg, problems := config.Parse(res)
	problems = append(readProblems, problems...)
	config.SortProblems(problems)
	displaced, err := c.alloc.SetConfig(cfg)
	if err != nil {
		// The parser never produces a set the allocator refuses; keep the
		// pools in use rather than guess.
		c.log.Error("the allocator refused the parsed pools; keeping the previous pools", "err", err)
		return
	}
	c.reportProblems(problems, cfg)
	for _, d := range displaced {
		why := fmt.Sprintf("%s is no longer in any IPAddressPool", ipList(d.IPs))
		if d.Reason == allocator.ReasonPoolNotAllowed {
			why = fmt.Sprintf("pool %s no longer serves this Service (its serviceAllocation changed, or the Service's or its namespace's labels did)", d.Pool)
		}
		obj := serviceRef(d.Key)
		if svc, err := c.services.Services(d.Key.Namespace).Get(d.Key.Name); err == nil {
			obj = svc
		}
		c.released(obj, allocator.Assignment{Pool: d.Pool, IPs: d.IPs}, why)
	}
	c.statusDirty.Store(true)
}

// adopt records the IPs in the status of every handled Service, oldest
// Service first, so the older of two Services claiming one IP keeps it.
// A Service whose IPs cannot be adopted gets an event; the reconcile
// after adoption then assigns it new IPs (or reports why it cannot).
func (c *Controller) adopt() (adopted, conflicts int) {
	svcs, _ := c.services.List(labels.Everything())
	svcs = slices.DeleteFunc(slices.Clone(svcs), func(s *corev1.Service) bool {
		return !lbapi.Handles(s, c.opts.LBClass) || len(s.Status.LoadBalancer.Ingress) == 0
	})
	sortOldestFirst(svcs)
	for _, svc := range svcs {
		ips, err := lbapi.StatusIPs(svc)
		if err == nil && len(ips) == 0 {
			continue
		}
		if err == nil {
			req, _ := Request(svc, c.nsLabels(svc.Namespace))
			_, err = c.alloc.Adopt(req, ips)
		}
		if err != nil {
			conflicts++
			msg := fmt.Sprintf("On start, could not keep %s from the Service's status: %v", statusIPText(svc), err)
			c.failed(svc, cmp.Or(allocator.ReasonOf(err), allocator.ReasonInvalidRequest), msg, allocator.Assignment{})
			continue
		}
		adopted++
	}
	return adopted, conflicts
}

func statusIPText(svc *corev1.Service) string {
	var s []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		s = append(s, cmp.Or(in.IP, in.Hostname))
	}
	return strings.Join(s, " and ")
}
