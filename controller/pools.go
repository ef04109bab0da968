package controller

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/herald-lb/herald/config"
	"github.com/herald-lb/herald/config/informer"
	"github.com/herald-lb/herald/config/v1beta1"
	"github.com/herald-lb/herald/controller/allocator"
	"github.com/herald-lb/herald/internal/lbapi"
)

// Reasons of events on configuration objects (those of the Valid
// condition are in lbapi).
const (
	EventInvalidConfiguration = "InvalidConfiguration"
	EventConfigurationWarning = "ConfigurationWarning"
	EventEditRefused          = "EditRefused"
)

// maxConditionMessage is the API's limit on a condition message.
const maxConditionMessage = 32768

// resources reads the configuration objects from the caches, with the
// Secrets of herald's namespace, the passwords in force and the addresses
// Services hold.
func (c *Controller) resources() (config.Resources, config.Problems) {
	res, probs := informer.Listers(c.cfg).Resources(c.opts.Namespace)
	secrets, _ := c.secrets.Secrets(c.opts.Namespace).List(labels.Everything())
	for _, s := range secrets {
		res.Secrets = append(res.Secrets, *s)
	}
	res.Passwords = c.storedPasswords()
	res.InUse = c.inUse()
	return res, probs
}

// inUse lists the addresses in the status of the Services herald handles.
func (c *Controller) inUse() []config.InUse {
	svcs, _ := c.services.List(labels.Everything())
	return lbapi.InUse(svcs, c.opts.LBClass)
}

// reportProblems keeps the problems and the objects' states for the status
// writer and sends events for each object whose problems or state changed:
// one per problem, or for an object whose refused edit leaves an older
// version in force, one EditRefused event saying so with the problems.
func (c *Controller) reportProblems(problems config.Problems, cfg *config.Config) {
	byObj := map[string]config.Problems{}
	for _, p := range problems {
		k := config.ObjectKey(p.Kind, p.Name)
		byObj[k] = append(byObj[k], p)
	}
	stale := cfg.Stale()
	for _, st := range stale {
		if k := config.ObjectKey(st.Kind, st.Name); byObj[k] == nil {
			byObj[k] = config.Problems{} // a stale object always reports
		}
	}
	c.mu.Lock()
	c.problems, c.objects = problems, cfg.Objects
	c.unadvertised = map[string]bool{}
	for name, pool := range cfg.Pools {
		if !pool.Advertised {
			c.unadvertised[name] = true
		}
	}
	c.waitsOnAddresses.Store(cfg.WaitsOnAddresses())
	c.passwords = passwordsInForce(cfg)
	type report struct {
		key string
		ps  config.Problems
		st  config.ObjectState
	}
	var send []report
	for k, ps := range byObj {
		st := cfg.Objects[k]
		text := ps.Error()
		if st.Stale {
			text = st.Describe() + "\n" + text
		}
		if c.reported[k] != text {
			c.reported[k] = text
			send = append(send, report{k, ps, st})
		}
	}
	for k := range c.reported {
		if _, ok := byObj[k]; !ok {
			delete(c.reported, k)
		}
	}
	c.mu.Unlock()
	c.metrics.setStale(stale)
	c.metrics.setInvalid(cfg.Objects)
	for _, r := range send {
		kind, name, _ := strings.Cut(r.key, "/")
		obj := c.configObject(kind, name)
		if r.st.Stale {
			texts := []string{}
			for _, p := range r.ps {
				texts = append(texts, problemText(p))
			}
			msg := r.st.Describe() + ": " + strings.Join(texts, "; ")
			c.log.Warn("configuration edit refused; the last valid version stays in force", "object", kind+" "+name, "state", r.st.Describe(), "problems", strings.Join(texts, "; "))
			if obj != nil {
				c.rec.Event(obj, corev1.EventTypeWarning, EventEditRefused, truncate(msg))
			}
			continue
		}
		for _, p := range r.ps {
			c.log.Warn("configuration problem", "problem", p.String())
			if obj == nil {
				continue
			}
			reason := EventInvalidConfiguration
			if p.Severity == config.Warning {
				reason = EventConfigurationWarning
			}
			c.rec.Event(obj, corev1.EventTypeWarning, reason, problemText(p))
		}
	}
}

// truncate keeps a message within the API's limit for conditions (events
// are shorter still in practice, but the API server trims those itself).
func truncate(s string) string {
	if len(s) > maxConditionMessage {
		return s[:maxConditionMessage-3] + "..."
	}
	return s
}

// problemText is a problem without the object, which the event or
// condition is attached to already.
func problemText(p config.Problem) string {
	s := p.Message
	if p.Field != "" {
		s = p.Field + ": " + s
	}
	if p.Severity == config.Warning {
		s += " (warning)"
	}
	return s
}

func (c *Controller) configObject(kind, name string) *unstructured.Unstructured {
	return informer.Listers(c.cfg).Get(kind, c.opts.Namespace, name)
}

// validCondition is the Valid condition for an object with these
// problems, in this state.
func validCondition(ps config.Problems, st config.ObjectState, generation int64) metav1.Condition {
	cond := metav1.Condition{Type: v1beta1.ConditionValid, Status: metav1.ConditionTrue, Reason: lbapi.ReasonValid,
		Message: "herald uses this object", ObservedGeneration: generation}
	if len(ps) == 0 && !st.Stale {
		return cond
	}
	cond.Status, cond.Reason = metav1.ConditionFalse, lbapi.ReasonPartlyIgnored
	if ps.Errors() > 0 {
		cond.Reason = lbapi.ReasonInvalid
	}
	texts := make([]string, 0, len(ps)+1)
	if st.Stale {
		cond.Reason = lbapi.ReasonEditRefused
		texts = append(texts, st.Describe())
	}
	for _, p := range ps {
		texts = append(texts, problemText(p))
	}
	cond.Message = strings.Join(texts, "; ")
	if len(cond.Message) > maxConditionMessage {
		cond.Message = cond.Message[:maxConditionMessage-3] + "..."
	}
	return cond
}

// statusLoop writes the status of herald.io objects at most once per
// StatusInterval, and only objects whose status differs from what they
// should show.
func (c *Controller) statusLoop(ctx context.Context) {
	interval := max(c.opts.StatusInterval, 10*time.Millisecond)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c.statusDirty.Swap(false) {
			if n := c.writeStatuses(ctx); n > 0 {
				c.statusDirty.Store(true) // retry the failed writes
			}
		}
	}
}

// writeStatuses updates the pool metrics and writes every status that
// is out of date; it returns how many writes failed.
func (c *Controller) writeStatuses(ctx context.Context) (failed int) {
	stats := map[string]allocator.PoolStats{}
	all := c.alloc.Stats()
	for _, s := range all {
		stats[s.Pool] = s
	}
	c.mu.Lock()
	unadvertised := c.unadvertised
	c.mu.Unlock()
	c.metrics.setPools(all, unadvertised)
	c.mu.Lock()
	problems, objects := c.problems, c.objects
	c.mu.Unlock()
	if err := c.writePasswords(ctx); err != nil && ctx.Err() == nil {
		c.log.Warn("writing the BGP password copy failed", "secret", c.opts.Namespace+"/"+lbapi.PasswordsSecretName, "err", err)
		failed++
	}
	now := metav1.Now()
	for _, k := range informer.Kinds {
		objs, _ := c.cfg[k.Kind].ByNamespace(c.opts.Namespace).List(labels.Everything())
		for _, o := range objs {
			u, ok := o.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			st := objects[config.ObjectKey(k.Kind, u.GetName())]
			cur, want, err := desiredStatus(k.Kind, u, problems.For(k.Kind, u.GetNamespace(), u.GetName()), st, stats, now)
			if err != nil {
				c.log.Warn("cannot read status", "kind", k.Kind, "name", u.GetName(), "err", err)
				continue
			}
			if equality.Semantic.DeepEqual(cur, want) {
				continue
			}
			body, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": u.GetUID()}, "status": want})
			if err != nil {
				continue
			}
			_, err = c.dyn.Resource(informer.GVR(k.Resource)).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.MergePatchType, body, metav1.PatchOptions{}, "status")
			if err != nil && ctx.Err() == nil {
				c.log.Warn("writing status failed", "kind", k.Kind, "name", u.GetName(), "err", err)
				failed++
			}
		}
	}
	return failed
}

// desiredStatus returns an object's status as it is and as it should be:
// the Valid condition (its transition time kept when its status holds),
// the version in force and, for pools, the address counts. An
// IPAddressPool the parser left out hands out nothing, so it shows no
// available addresses.
func desiredStatus(kind string, u *unstructured.Unstructured, ps config.Problems, st config.ObjectState, stats map[string]allocator.PoolStats, now metav1.Time) (cur, want any, err error) {
	raw, _, _ := unstructured.NestedMap(u.Object, "status")
	if raw == nil {
		raw = map[string]any{}
	}
	if kind == config.KindIPAddressPool {
		return desiredPoolStatus(u, raw, ps, st, stats, now)
	}
	cond := validCondition(ps, st, u.GetGeneration())
	var st0 v1beta1.ConfigStatus
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st0); err != nil {
		return nil, nil, err
	}
	next := *st0.DeepCopy()
	apimeta.SetStatusCondition(&next.Conditions, cond)
	if next.InForce, err = inForce(u, st, next.InForce, now); err != nil {
		return nil, nil, err
	}
	return st0, next, nil
}

// ConditionAdvertised is a pool's condition that says whether an
// advertisement in force selects it (only while the pool is in use).
const ConditionAdvertised = lbapi.ConditionAdvertised

// desiredPoolStatus is desiredStatus for a pool: the address counts, the
// Valid condition, and the Advertised condition in place of the parser's
// warning that no advertisement selects the pool (the pool itself is
// valid; its Services' IPs just go unannounced).
func desiredPoolStatus(u *unstructured.Unstructured, raw map[string]any, ps config.Problems, st config.ObjectState, stats map[string]allocator.PoolStats, now metav1.Time) (cur, want any, err error) {
	var unannounced *config.Problem
	rest := make(config.Problems, 0, len(ps))
	for i := range ps {
		if ps[i].Code == config.CodeNotAdvertised {
			unannounced = &ps[i]
			continue
		}
		rest = append(rest, ps[i])
	}
	cond := validCondition(rest, st, u.GetGeneration())
	var st0 v1beta1.IPAddressPoolStatus
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st0); err != nil {
		return nil, nil, err
	}
	next := *st0.DeepCopy()
	s := stats[u.GetName()]
	next.AssignedIPv4, next.AssignedIPv6 = 0, 0
	next.AvailableIPv4, next.AvailableIPv6 = 0, 0
	if s.IPv4.Total != nil {
		next.AssignedIPv4, next.AvailableIPv4 = int64(s.IPv4.InUse), s.IPv4.AvailableInt64()
		next.AssignedIPv6, next.AvailableIPv6 = int64(s.IPv6.InUse), s.IPv6.AvailableInt64()
	}
	apimeta.SetStatusCondition(&next.Conditions, cond)
	adv := metav1.Condition{Type: ConditionAdvertised, Status: metav1.ConditionTrue, Reason: "Advertised",
		Message: "an L2Advertisement or BGPAdvertisement selects this pool", ObservedGeneration: u.GetGeneration()}
	switch {
	case st.InForce == 0:
		// Not in use: nothing is announced or not announced.
		apimeta.RemoveStatusCondition(&next.Conditions, ConditionAdvertised)
	case unannounced != nil:
		adv.Status, adv.Reason, adv.Message = metav1.ConditionFalse, config.CodeNotAdvertised, unannounced.Message
		fallthrough
	default:
		apimeta.SetStatusCondition(&next.Conditions, adv)
	}
	if next.InForce, err = inForce(u, st, next.InForce, now); err != nil {
		return nil, nil, err
	}
	return st0, next, nil
}

// inForce is the status.inForce an object should carry: a copy of its
// current spec once the parser accepted this very generation, else what it
// has (the last valid version stays recorded while an edit is refused).
func inForce(u *unstructured.Unstructured, st config.ObjectState, have *v1beta1.InForce, now metav1.Time) (*v1beta1.InForce, error) {
	if st.Stale || st.InForce == 0 || st.InForce != st.Generation || st.Generation != u.GetGeneration() {
		return have, nil
	}
	spec, err := json.Marshal(u.Object["spec"])
	if err != nil {
		return nil, err
	}
	if have != nil && have.Generation == st.Generation && string(have.Spec.Raw) == string(spec) {
		return have, nil
	}
	return &v1beta1.InForce{Generation: st.Generation, Since: now, Spec: runtime.RawExtension{Raw: spec}}, nil
}
