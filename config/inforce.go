package config

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/config/v1beta1"
)

// ObjectState says which version of one configuration object is in force.
//
// An edit that makes an object invalid does not take it out of use: the
// last valid version, which the controller keeps in the object's
// status.inForce, stays in force until the object is fixed or deleted. The
// controller and every speaker run the same Parse over the same objects
// (status included), so they agree on it, also after a restart.
type ObjectState struct {
	Kind, Namespace, Name string
	// Generation is the object's metadata.generation.
	Generation int64
	// InForce is the generation in use: Generation when the spec is valid,
	// that of the stored version when the spec was refused, 0 when no
	// version of the object is in use.
	InForce int64
	// Stale is set when the current spec (or the Secret it names) was
	// refused and the stored version is used instead.
	Stale bool
}

// Describe is "in force: generation N, refused: generation M", or the
// part of it that applies.
func (s ObjectState) Describe() string {
	switch {
	case s.InForce == 0:
		return fmt.Sprintf("refused: generation %d, no version in force", s.Generation)
	case s.Stale && s.InForce == s.Generation:
		return fmt.Sprintf("in force: generation %d with the password last read, refused: the Secret it names", s.InForce)
	case s.Stale:
		return fmt.Sprintf("in force: generation %d, refused: generation %d", s.InForce, s.Generation)
	}
	return fmt.Sprintf("in force: generation %d", s.InForce)
}

// ObjectKey keys Config.Objects.
func ObjectKey(kind, name string) string { return kind + "/" + name }

// State returns the state of one object, and whether it was read at all.
func (c *Config) State(kind, name string) (ObjectState, bool) {
	s, ok := c.Objects[ObjectKey(kind, name)]
	return s, ok
}

// WaitsOnAddresses reports whether a pool edit is refused and kept as it
// was: such a refusal may end when Services free addresses (the edit
// dropped addresses in use), so the caller parses again when the
// addresses Services hold change. No other decision depends on them.
func (c *Config) WaitsOnAddresses() bool {
	for _, s := range c.Objects {
		if s.Stale && s.Kind == KindIPAddressPool {
			return true
		}
	}
	return false
}

// Stale lists the objects whose current spec was refused while an older
// version stays in force, sorted by kind and name.
func (c *Config) Stale() []ObjectState {
	var out []ObjectState
	for _, s := range c.Objects {
		if s.Stale {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// resolve parses one object: its current spec, and when that has errors
// the version in force, if the object has one that still fits. The current
// spec's problems are reported either way; they explain the refusal.
func resolve[T any, S any](p *parser, kind string, o *T, m *metav1.ObjectMeta, inForce *v1beta1.InForce, spec func(*T) *S, parse func(*T, *reporter)) {
	var cur Problems
	r := &reporter{kind: kind, namespace: m.Namespace, name: m.Name, out: &cur}
	parse(o, r)
	p.problems = append(p.problems, cur...)
	st := ObjectState{Kind: kind, Namespace: m.Namespace, Name: m.Name, Generation: m.Generation}
	if r.ok() {
		st.InForce = m.Generation
		p.cfg.Objects[ObjectKey(kind, m.Name)] = st
		return
	}
	if old, ok := storedVersion(o, spec, inForce); ok {
		p.fallback = true
		scratch := &reporter{kind: kind, namespace: m.Namespace, name: m.Name, out: new(Problems)}
		parse(old, scratch)
		p.fallback = false
		if scratch.ok() {
			st.InForce, st.Stale = inForce.Generation, true
		}
	}
	p.cfg.Objects[ObjectKey(kind, m.Name)] = st
}

// storedVersion is a copy of the object with the spec in force in place of
// its current one.
func storedVersion[T any, S any](o *T, spec func(*T) *S, inForce *v1beta1.InForce) (*T, bool) {
	if inForce == nil || len(inForce.Spec.Raw) == 0 {
		return nil, false
	}
	cp := *o
	var s S
	if err := json.Unmarshal(inForce.Spec.Raw, &s); err != nil {
		return nil, false
	}
	*spec(&cp) = s
	return &cp, true
}

// reserve records the ranges of every pool's version in force. They stay
// with that pool: an edit of another pool that takes any of them is
// refused, even when the other pool is older, so an edit can never move
// an address that is in use.
func (p *parser) reserve(pools []*v1beta1.IPAddressPool) {
	p.inForceRanges = map[string][]Range{}
	for _, o := range pools {
		f := o.Status.InForce
		if f == nil || len(f.Spec.Raw) == 0 {
			continue
		}
		var s v1beta1.IPAddressPoolSpec
		if err := json.Unmarshal(f.Spec.Raw, &s); err != nil {
			continue
		}
		for i, e := range s.Addresses {
			rg, err := ParseAddressEntry(string(e))
			if err != nil {
				continue
			}
			p.inForceRanges[o.Name] = append(p.inForceRanges[o.Name], rg)
			p.reserved = append(p.reserved, ownedRange{r: rg, pool: o.Name, field: indexed("spec.addresses", i)})
		}
	}
}

// checkReserved refuses ranges that overlap another pool's addresses in
// force, unless the pool already held them itself.
func (p *parser) checkReserved(r *reporter, pool string, ranges []Range, fields []string) {
	for i, rg := range ranges {
		if p.heldBy(pool, rg) {
			continue
		}
		for _, res := range p.reserved {
			if res.pool != pool && res.r.Overlaps(rg) {
				r.errorf(fields[i], "%s overlaps %s of IPAddressPool %s, which is in force there; an address may belong to one pool only, and the pool that holds it keeps it", rg, res.r, res.pool)
				break
			}
		}
	}
}

// heldBy reports whether the range lies inside one range the pool has in
// force.
func (p *parser) heldBy(pool string, rg Range) bool {
	for _, own := range p.inForceRanges[pool] {
		if own.Contains(rg.First) && own.Contains(rg.Last) {
			return true
		}
	}
	return false
}

// checkInUse refuses an edit that drops from the pool an address its
// version in force holds and a Service uses: the Service would lose it.
func (p *parser) checkInUse(r *reporter, name string, pool *Pool) {
	held := p.inForceRanges[name]
	if len(held) == 0 {
		return
	}
	var lost []string
	for _, u := range p.in.InUse {
		if pool.Contains(u.Addr) {
			continue
		}
		for _, rg := range held {
			if rg.Contains(u.Addr) {
				lost = append(lost, fmt.Sprintf("%s (Service %s)", u.Addr, u.Service))
				break
			}
		}
	}
	if len(lost) == 0 {
		return
	}
	sort.Strings(lost)
	const most = 5
	more := ""
	if len(lost) > most {
		more = fmt.Sprintf(" and %d more", len(lost)-most)
		lost = lost[:most]
	}
	r.errorf("spec.addresses", "no longer includes %s%s, in use: move those Services to other addresses (or delete them) before removing their addresses from the pool", strings.Join(lost, ", "), more)
}

// checkAliasesInUse refuses a Community edit that drops an alias of its
// version in force while a BGPAdvertisement uses it: the advertisement
// would stop working although nobody edited it.
func (p *parser) checkAliasesInUse(r *reporter, o *v1beta1.Community, defs map[string]Community) {
	f := o.Status.InForce
	if f == nil || len(f.Spec.Raw) == 0 {
		return
	}
	var old v1beta1.CommunitySpec
	if err := json.Unmarshal(f.Spec.Raw, &old); err != nil {
		return
	}
	for _, a := range old.Communities {
		if _, kept := defs[a.Name]; kept {
			continue
		}
		if user := p.aliasUser(a.Name); user != "" {
			r.errorf("spec.communities", "drops alias %q, which BGPAdvertisement %s uses: remove it there first", a.Name, user)
		}
	}
}

// aliasUser names a BGPAdvertisement whose spec, current or in force,
// uses the alias.
func (p *parser) aliasUser(alias string) string {
	for _, adv := range p.in.BGPAdvertisements {
		if !p.inScope(adv.Namespace) {
			continue
		}
		specs := []v1beta1.BGPAdvertisementSpec{adv.Spec}
		if f := adv.Status.InForce; f != nil {
			var s v1beta1.BGPAdvertisementSpec
			if json.Unmarshal(f.Spec.Raw, &s) == nil {
				specs = append(specs, s)
			}
		}
		for _, s := range specs {
			for _, c := range s.Communities {
				if string(c) == alias {
					return adv.Name
				}
			}
		}
	}
	return ""
}
