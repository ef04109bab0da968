package migrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/herald-lb/herald/config"
)

// decode fills herald's spec from MetalLB's: the fields in dropped are
// reported and left out, as is any other field herald's spec does not
// have; the rest must decode into herald's types (a value herald cannot
// hold is an error, and the object is left out).
func (o *object) decode(spec map[string]any, into any, dropped map[string]string) bool {
	known := jsonFields(reflect.TypeOf(into).Elem())
	kept := map[string]any{}
	for _, k := range sortedKeys(spec) {
		switch why, drop := dropped[k]; {
		case drop:
			o.warnf("spec."+k, "not translated: %s", why)
		case !known[k]:
			o.warnf("spec."+k, "not translated: herald's %s has no such field", o.kind)
		default:
			kept[k] = spec[k]
		}
	}
	data, err := json.Marshal(kept)
	if err != nil {
		o.errorf("spec", "%v", err)
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		field, msg := decodeError(err)
		o.errorf(joinField("spec", field), "%s; the %s is not translated", msg, o.kind)
		return false
	}
	return true
}

// decodeError says what is wrong with a value in words a user of
// MetalLB's YAML reads, without Go's type names: the field's path below
// the decoded object, and the message.
func decodeError(err error) (field, msg string) {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field, fmt.Sprintf("is %s, not %s", jsonKind(te.Value), expected(te.Type))
	}
	s := strings.TrimPrefix(err.Error(), "json: ")
	if f, ok := strings.CutPrefix(s, "unknown field "); ok {
		return "", "has the unknown field " + f
	}
	return "", s
}

// jsonKind names the kind of JSON value encoding/json reports ("string",
// "number", "number 1.5", "object", "array", "bool").
func jsonKind(v string) string {
	switch {
	case v == "bool":
		return "true or false"
	case v == "object":
		return "an object"
	case v == "array":
		return "a list"
	case strings.HasPrefix(v, "number"):
		if n := strings.TrimSpace(strings.TrimPrefix(v, "number")); n != "" {
			return "the number " + n
		}
		return "a number"
	case v == "string":
		return "a string"
	}
	return v
}

// expected describes a Go type as the YAML value it takes.
func expected(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.String() == "v1.Duration" {
		return "a duration such as 90s"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("a whole number from 0 to %d", uint64(1)<<(t.Bits())-1)
	case reflect.Slice, reflect.Array:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(expected(t.Elem()), "a "), "an ") + "s"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another value"
}

// describeValue names the kind of a decoded YAML value.
func describeValue(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "true or false"
	case float64, int64, int:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	case nil:
		return "empty"
	}
	return "a value"
}

func joinField(parent, child string) string {
	if child == "" {
		return parent
	}
	return parent + "." + child
}

// pool rewrites a pool's addresses as MetalLB reads them: a CIDR with
// host bits (198.51.100.10/24, as MetalLB's own docs write some) is the
// network it lies in, which herald's API refuses to guess.
func (o *object) pool(spec map[string]any) bool {
	var list []any
	switch l := spec["addresses"].(type) {
	case []any:
		list = l
	case []string: // from the legacy configuration
		for _, a := range l {
			list = append(list, a)
		}
		spec["addresses"] = list
	}
	for i, a := range list {
		s, ok := a.(string)
		if !ok || !strings.Contains(s, "/") {
			continue
		}
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil || p == p.Masked() {
			continue
		}
		list[i] = p.Masked().String()
		o.notef(fmt.Sprintf("spec.addresses[%d]", i), "%s has host bits set; MetalLB uses the network %s, and so does the translation", s, p.Masked())
	}
	return true
}

// references drops the names in an advertisement's ipAddressPools and
// peers that no object can have (MetalLB's documentation writes PoolA):
// they refer to nothing in MetalLB, and herald's API refuses them. A
// list left empty would mean "every pool" or "every peer" in both, so an
// advertisement whose list names only such objects, which announced
// nothing, is left out instead.
func (o *object) references(spec map[string]any) bool {
	for _, k := range []string{"ipAddressPools", "peers"} {
		list, ok := spec[k].([]any)
		if !ok || len(list) == 0 {
			continue
		}
		var kept []any
		for i, v := range list {
			name, _ := v.(string)
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				o.warnf(fmt.Sprintf("spec.%s[%d]", k, i), "%q left out: it is not a valid object name, so no object has it (%s)", name, errs[0])
				continue
			}
			kept = append(kept, v)
		}
		if len(kept) == 0 {
			o.errorf("spec."+k, "names no object that can exist, so this advertisement announced nothing in MetalLB; not translated (an empty list would mean all)")
			return false
		}
		spec[k] = kept
	}
	return true
}

// peer rewrites a BGPPeer's spec where herald's differs from MetalLB's,
// before decode. It returns false when the peer cannot be translated.
func (o *object) peer(spec map[string]any) bool {
	if _, ok := spec["interface"]; ok && spec["peerAddress"] == nil {
		o.errorf("spec.interface", "an unnumbered peer (interface, no peerAddress) cannot be translated: herald's BGPPeer needs the neighbour's address in peerAddress")
		return false
	}
	// v1beta1 durations are not pointers, and MetalLB's conversion to
	// v1beta2 writes an unset one as 0s: both mean "the default" there,
	// while herald refuses a zero hold time.
	if s, ok := spec["holdTime"].(string); ok && isZeroDuration(s) {
		delete(spec, "holdTime")
		o.warnf("spec.holdTime", "%s left out: MetalLB writes 0s for an unset holdTime; herald's default applies (90s)", s)
	}
	if s, ok := spec["keepaliveTime"].(string); ok && isZeroDuration(s) {
		delete(spec, "keepaliveTime")
		hold := "holdTime 90s, herald's default"
		if h, ok := spec["holdTime"].(string); ok {
			hold = "holdTime " + h
		}
		o.warnf("spec.keepaliveTime", "%s left out: MetalLB writes 0s for an unset keepaliveTime; herald's default applies (a third of %s)", s, hold)
	}
	// MetalLB: a basic-auth Secret, key "password", in MetalLB's
	// namespace. herald: a key of a Secret in herald's namespace.
	// MetalLB's ConfigMap converter writes "passwordSecret: {}" on every
	// peer, which means no Secret.
	if raw, present := spec["passwordSecret"]; present {
		ref, isMap := raw.(map[string]any)
		name, _ := ref["name"].(string)
		switch {
		case raw == nil || (isMap && name == "" && ref["namespace"] == nil && len(ref) == 0):
			delete(spec, "passwordSecret")
		case !isMap:
			o.errorf("spec.passwordSecret", "is %s, not an object naming a Secret; the BGPPeer is not translated", describeValue(raw))
			return false
		case name == "":
			o.errorf("spec.passwordSecret.name", "missing: the reference names no Secret; the BGPPeer is not translated (remove passwordSecret if the session has no password)")
			return false
		default:
			ns, _ := ref["namespace"].(string)
			if ns == "" {
				ns = o.ns
			}
			if ns == "" {
				ns = o.t.opts.MetalLBNamespace
			}
			spec["passwordSecret"] = map[string]any{"name": name, "key": "password"}
			if ns != o.t.opts.Namespace {
				o.warnf("spec.passwordSecret", "herald reads the password from key \"password\" of Secret %s/%s: copy Secret %s/%s there (it is not part of this output)",
					o.t.opts.Namespace, name, ns, name)
			}
		}
	}
	return true
}

// community leaves out the aliases of a Community whose names herald
// knows as well-known communities (MetalLB lets an alias take such a
// name): one with the same value is not needed, one with another value
// would change what the name means, and both are reported. It returns
// false when no alias is left, and the object with them.
func (o *object) community(spec map[string]any) bool {
	list, ok := spec["communities"].([]any)
	if !ok {
		return true
	}
	kept := list[:0:0]
	for i, a := range list {
		m, _ := a.(map[string]any)
		name, _ := m["name"].(string)
		value, _ := m["value"].(string)
		known, isKnown := config.WellKnownCommunity(name)
		if !isKnown {
			kept = append(kept, a)
			continue
		}
		field := fmt.Sprintf("spec.communities[%d]", i)
		if c, err := config.ParseCommunity(value); err == nil && c == known {
			o.notef(field, "alias %q left out: herald knows %s as %s already, so references to it keep their meaning", name, name, known)
		} else {
			o.errorf(field, "alias %q (%s) left out: herald reserves the name for the well-known community %s, so references to it would change meaning; rename the alias in MetalLB's configuration and in the advertisements that use it", name, value, known)
		}
	}
	spec["communities"] = kept
	if len(kept) == 0 {
		o.notef("", "not written: it defined only aliases herald knows as well-known communities")
		return false
	}
	return true
}

// bfd leaves out what herald's BFD (GoBGP's) does not do, so that the
// profile it writes is one herald uses as it stands. Settings equal to
// what herald does anyway (echo and passive mode off, echoInterval
// without echo mode, FRR's default minimum TTL) are noted; the others
// change behaviour, and are reported.
func (o *object) bfd(spec map[string]any) {
	echo, _ := spec["echoMode"].(bool)
	interval, hasInterval := spec["echoInterval"]
	if hasInterval {
		delete(spec, "echoInterval")
		if !echo {
			o.notef("spec.echoInterval", "%v left out: without echoMode it has no effect in MetalLB either", interval)
		}
	}
	if v, ok := spec["echoMode"]; ok {
		delete(spec, "echoMode")
		if echo {
			also := ""
			if hasInterval {
				also = fmt.Sprintf(", and echoInterval %v with it", interval)
			}
			o.warnf("spec.echoMode", "true left out%s: herald's BFD has no echo function; the session is checked by control packets at receiveInterval and transmitInterval only", also)
		} else if v != false {
			o.warnf("spec.echoMode", "is %s, not true or false: left out", describeValue(v))
		}
	}
	if v, ok := spec["passiveMode"]; ok {
		delete(spec, "passiveMode")
		if v == true {
			o.warnf("spec.passiveMode", "true left out: herald's speakers always start the BFD session themselves")
		} else if v != false {
			o.warnf("spec.passiveMode", "is %s, not true or false: left out", describeValue(v))
		}
	}
	if v, ok := spec["minimumTtl"]; ok {
		delete(spec, "minimumTtl")
		if f, isNum := v.(float64); isNum && f == bfdDefaultMinimumTTL {
			o.notef("spec.minimumTtl", "254 left out: it is FRR's default, and herald's BFD sessions are single-hop, sent with TTL 255")
		} else {
			o.warnf("spec.minimumTtl", "%v left out: herald's BFD sessions are single-hop (sent with TTL 255) and do not check the TTL of what they receive", v)
		}
	}
}

// bfdDefaultMinimumTTL is FRR's minimum-ttl default, which MetalLB's
// converter writes when the ConfigMap set it.
const bfdDefaultMinimumTTL = 254

func isZeroDuration(s string) bool {
	d, err := time.ParseDuration(s)
	return err == nil && d == 0
}

// jsonFields are the JSON names of a struct type's fields.
func jsonFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out[name] = true
		}
	}
	return out
}
