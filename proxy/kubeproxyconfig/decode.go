package kubeproxyconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Parse decodes a KubeProxyConfiguration file (kube-proxy's --config)
// strictly: an unknown field, a value of the wrong type or a duplicate key
// is an error naming name and the field's path. Every such error is
// reported, not only the first.
func Parse(name string, data []byte) (*Config, error) {
	top, err := mapping(name, data)
	if err != nil {
		return nil, err
	}
	return decodeConfig(name, top)
}

// ParseFileOrConfigMap decodes either a bare KubeProxyConfiguration or the
// ConfigMap holding one under ConfigMapKey (kubeadm's kube-system/kube-proxy,
// as `kubectl get -o yaml` prints it). source names where the
// configuration was found, for messages.
func ParseFileOrConfigMap(name string, data []byte) (c *Config, source string, err error) {
	top, err := mapping(name, data)
	if err != nil {
		return nil, name, err
	}
	if top["kind"] != "ConfigMap" {
		c, err = decodeConfig(name, top)
		return c, name, err
	}
	source = name + ": ConfigMap"
	if md, ok := top["metadata"].(map[string]any); ok {
		ns, _ := md["namespace"].(string)
		n, _ := md["name"].(string)
		if ns != "" {
			n = ns + "/" + n
		}
		source += " " + n
	}
	source += ", key " + ConfigMapKey
	d, _ := top["data"].(map[string]any)
	text, ok := d[ConfigMapKey].(string)
	if !ok {
		return nil, source, fmt.Errorf("%s: no data.%s holding a %s", strings.TrimSuffix(source, ", key "+ConfigMapKey), ConfigMapKey, Kind)
	}
	c, err = Parse(source, []byte(text))
	return c, source, err
}

// mapping reads the YAML document into a generic mapping.
func mapping(name string, data []byte) (map[string]any, error) {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not valid YAML: %v", name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber() // integers stay exact, and a fraction is told apart
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	top, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a %s (a YAML mapping), got %s", name, Kind, describe(v))
	}
	return top, nil
}

func decodeConfig(name string, top map[string]any) (*Config, error) {
	d := decoder{name: name}
	var c Config
	d.value("", top, reflect.ValueOf(&c).Elem())
	if c.APIVersion != APIVersion {
		d.fail("apiVersion", "%q: want %s", c.APIVersion, APIVersion)
	}
	if c.Kind != Kind {
		d.fail("kind", "%q: want %s", c.Kind, Kind)
	}
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return &c, nil
}

// decoder walks a generic JSON value against a Go type, collecting errors.
type decoder struct {
	name string
	errs []error
}

func (d *decoder) fail(path, format string, args ...any) {
	d.errs = append(d.errs, fmt.Errorf("%s: %s: %s", d.name, path, fmt.Sprintf(format, args...)))
}

// quantitySyntax is a resource quantity's form, checked without
// evaluating it: apimachinery's ParseQuantity takes minutes over an
// exponent such as 1e-99999999, and only zero or not matters here.
var quantitySyntax = regexp.MustCompile(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$`)

var (
	durationType = reflect.TypeOf(time.Duration(0))
	nanosType    = reflect.TypeOf(nanosOrText(0))
	quantityType = reflect.TypeOf(quantity(""))
)

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// value decodes in into out; null leaves out at its zero value, as
// encoding/json does.
func (d *decoder) value(path string, in any, out reflect.Value) {
	if in == nil {
		return
	}
	t := out.Type()
	switch {
	case t == durationType:
		s, ok := in.(string)
		if !ok {
			d.fail(path, "want a duration such as 30s, got %s", describe(in))
			return
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			d.fail(path, "%q is not a duration (such as 30s or 1h0m0s)", s)
			return
		}
		out.SetInt(int64(v))
		return
	case t == nanosType:
		switch x := in.(type) {
		case json.Number:
			n, err := strconv.ParseInt(x.String(), 10, 64)
			if err != nil {
				d.fail(path, "%s is not a whole number of nanoseconds", x)
				return
			}
			out.SetInt(n)
		case string:
			v, err := time.ParseDuration(x)
			if err != nil {
				d.fail(path, "%q is not a duration", x)
				return
			}
			out.SetInt(int64(v))
		default:
			d.fail(path, "want a duration or nanoseconds, got %s", describe(in))
		}
		return
	case t == quantityType:
		var s string
		switch x := in.(type) {
		case json.Number:
			s = x.String()
		case string:
			s = x
		default:
			d.fail(path, "want a quantity such as 0 or 64Ki, got %s", describe(in))
			return
		}
		if !quantitySyntax.MatchString(s) {
			d.fail(path, "%q is not a quantity", s)
			return
		}
		out.SetString(s)
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		d.value(path, in, p.Elem())
		out.Set(p)
	case reflect.Struct:
		m, ok := in.(map[string]any)
		if !ok {
			d.fail(path, "want a mapping, got %s", describe(in))
			return
		}
		d.fields(path, m, out)
	case reflect.Map: // featureGates: string to bool
		m, ok := in.(map[string]any)
		if !ok {
			d.fail(path, "want a mapping, got %s", describe(in))
			return
		}
		mv := reflect.MakeMapWithSize(t, len(m))
		for _, k := range sortedKeys(m) {
			ev := reflect.New(t.Elem()).Elem()
			d.value(join(path, k), m[k], ev)
			mv.SetMapIndex(reflect.ValueOf(k), ev)
		}
		out.Set(mv)
	case reflect.Slice:
		l, ok := in.([]any)
		if !ok {
			d.fail(path, "want a list, got %s", describe(in))
			return
		}
		sv := reflect.MakeSlice(t, len(l), len(l))
		for i, e := range l {
			d.value(fmt.Sprintf("%s[%d]", path, i), e, sv.Index(i))
		}
		out.Set(sv)
	case reflect.String:
		s, ok := in.(string)
		if !ok {
			d.fail(path, "want a string, got %s", describe(in))
			return
		}
		out.SetString(s)
	case reflect.Bool:
		b, ok := in.(bool)
		if !ok {
			d.fail(path, "want true or false, got %s", describe(in))
			return
		}
		out.SetBool(b)
	case reflect.Int32, reflect.Uint32, reflect.Float32:
		d.number(path, in, out)
	default:
		d.fail(path, "cannot decode into %s", t) // a type this package does not use
	}
}

// number decodes a number into an int32, a uint32 or a float32 (the
// file's only numeric types), refusing fractions for the integers and
// anything out of range.
func (d *decoder) number(path string, in any, out reflect.Value) {
	n, ok := in.(json.Number)
	var err error
	want := "a number"
	switch out.Kind() {
	case reflect.Int32:
		want = "a whole number (32 bits)"
		var v int64
		if v, err = strconv.ParseInt(string(n), 10, 32); err == nil {
			out.SetInt(v)
		}
	case reflect.Uint32:
		want = "a whole number, not negative"
		var v uint64
		if v, err = strconv.ParseUint(string(n), 10, 32); err == nil {
			out.SetUint(v)
		}
	default:
		var v float64
		if v, err = strconv.ParseFloat(string(n), 32); err == nil {
			out.SetFloat(v)
		}
	}
	if !ok || err != nil {
		d.fail(path, "want %s, got %s", want, describe(in))
	}
}

// fields decodes a mapping into a struct by the fields' json names; a key
// naming no field is an error.
func (d *decoder) fields(path string, m map[string]any, out reflect.Value) {
	t := out.Type()
	byName := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		byName[name] = i
	}
	for _, k := range sortedKeys(m) {
		i, ok := byName[k]
		if !ok {
			d.fail(join(path, k), "unknown field (kube-proxy v1.34's %s has none of this name)", Kind)
			continue
		}
		d.value(join(path, k), m[k], out.Field(i))
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// describe names a decoded JSON value for messages.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing (null)"
	case string:
		return fmt.Sprintf("the string %q", x)
	case json.Number:
		return "the number " + x.String()
	case bool:
		return strconv.FormatBool(x)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}
