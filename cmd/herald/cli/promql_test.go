package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The monitoring test needs the vector selectors of the shipped alerts
// and dashboard panels. Prometheus' own parser is a module far larger than
// this need (and not in go.mod); these few rules of PromQL's grammar find
// the selectors: an identifier is a metric name unless it calls a
// function or aggregation, is a keyword, or names labels (the lists after
// by, without, on, ignoring, group_left, group_right, and the matchers
// inside braces); strings, numbers, durations and ranges name none.

// A selector is one vector selector: the metric name and its label
// matchers.
type selector struct {
	name     string
	matchers []matcher
}

type matcher struct{ label, op, value string }

func (s selector) String() string {
	var ms []string
	for _, m := range s.matchers {
		ms = append(ms, m.label+m.op+strconv.Quote(m.value))
	}
	if len(ms) == 0 {
		return s.name
	}
	return s.name + "{" + strings.Join(ms, ",") + "}"
}

type tokenKind int

const (
	tIdent tokenKind = iota
	tString
	tNumber
	tVariable // a Grafana variable: $name, ${name}
	tPunct
)

type token struct {
	kind tokenKind
	text string // a string's value, unquoted
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func isIdent(c byte) bool { return isIdentStart(c) || ('0' <= c && c <= '9') }

func lexPromQL(expr string) ([]token, error) {
	var out []token
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			var b strings.Builder
			j := i + 1
			for ; j < len(expr) && expr[j] != c; j++ {
				if expr[j] == '\\' && c != '`' && j+1 < len(expr) {
					j++ // an escaped character stands for itself here
				}
				b.WriteByte(expr[j])
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			out = append(out, token{tString, b.String()})
			i = j + 1
		case ('0' <= c && c <= '9') || (c == '.' && i+1 < len(expr) && '0' <= expr[i+1] && expr[i+1] <= '9'):
			// Numbers, hex, exponents and durations (5m, 1h30m).
			j := i
			for j < len(expr) && (isIdent(expr[j]) || expr[j] == '.') {
				j++
			}
			out = append(out, token{tNumber, expr[i:j]})
			i = j
		case c == '$':
			j := i + 1
			if j < len(expr) && expr[j] == '{' {
				for j < len(expr) && expr[j] != '}' {
					j++
				}
				j++
			} else {
				for j < len(expr) && isIdent(expr[j]) {
					j++
				}
			}
			out = append(out, token{tVariable, expr[i:min(j, len(expr))]})
			i = j
		case isIdentStart(c):
			j := i
			for j < len(expr) && isIdent(expr[j]) {
				j++
			}
			out = append(out, token{tIdent, expr[i:j]})
			i = j
		default:
			n := 1
			if i+1 < len(expr) && slices.Contains([]string{"==", "!=", ">=", "<=", "=~", "!~"}, expr[i:i+2]) {
				n = 2
			}
			out = append(out, token{tPunct, expr[i : i+n]})
			i += n
		}
	}
	return out, nil
}

var (
	// labelLists are the keywords followed by a parenthesised list of
	// label names.
	labelLists = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
	keywords   = []string{"and", "or", "unless", "bool", "offset", "inf", "nan"}
)

// selectors returns the vector selectors of a PromQL expression, in order.
func selectors(expr string) ([]selector, error) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return nil, err
	}
	is := func(i int, kind tokenKind, text string) bool {
		return i < len(toks) && toks[i].kind == kind && toks[i].text == text
	}
	// skip returns the index of the token closing the bracket at i.
	skip := func(i int, open, close string) (int, error) {
		depth := 0
		for j := i; j < len(toks); j++ {
			switch {
			case is(j, tPunct, open):
				depth++
			case is(j, tPunct, close):
				depth--
				if depth == 0 {
					return j, nil
				}
			}
		}
		return 0, fmt.Errorf("unbalanced %s", open)
	}
	var out []selector
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case is(i, tPunct, "["): // a range or a subquery's
			if i, err = skip(i, "[", "]"); err != nil {
				return nil, err
			}
		case is(i, tPunct, "{"): // a selector without a name before its braces
			s, end, err := braces(toks, i)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
			i = end
		case t.kind == tIdent:
			word := strings.ToLower(t.text)
			switch {
			case slices.Contains(labelLists, word):
				if is(i+1, tPunct, "(") {
					if i, err = skip(i+1, "(", ")"); err != nil {
						return nil, err
					}
				}
			case slices.Contains(keywords, word):
			case is(i+1, tPunct, "("): // a function or an aggregation
			case i+1 < len(toks) && toks[i+1].kind == tIdent && slices.Contains([]string{"by", "without"}, strings.ToLower(toks[i+1].text)):
				// an aggregation with its grouping first: sum by (x) (...)
			default:
				s := selector{name: t.text}
				if is(i+1, tPunct, "{") {
					b, end, err := braces(toks, i+1)
					if err != nil {
						return nil, err
					}
					if b.name != "" {
						return nil, fmt.Errorf("%s: a second metric name %q in the braces", t.text, b.name)
					}
					s.matchers = b.matchers
					i = end
				}
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// braces reads the label matchers of the braces opening at toks[i]; a
// __name__ matcher with = (or a bare quoted name) gives the metric name.
func braces(toks []token, i int) (selector, int, error) {
	var s selector
	for j := i + 1; j < len(toks); j++ {
		t := toks[j]
		switch {
		case t.kind == tPunct && t.text == "}":
			return s, j, nil
		case t.kind == tPunct && t.text == ",":
		case t.kind == tString && j+1 < len(toks) && (toks[j+1].text == "," || toks[j+1].text == "}"):
			s.name = t.text
		case (t.kind == tIdent || t.kind == tString) && j+2 < len(toks) && toks[j+1].kind == tPunct && toks[j+2].kind == tString:
			op := toks[j+1].text
			if !slices.Contains([]string{"=", "!=", "=~", "!~"}, op) {
				return s, 0, fmt.Errorf("matcher %s %s", t.text, op)
			}
			if t.text == "__name__" && op == "=" {
				s.name = toks[j+2].text
			} else {
				s.matchers = append(s.matchers, matcher{t.text, op, toks[j+2].text})
			}
			j += 2
		default:
			return s, 0, fmt.Errorf("unexpected %q in braces", t.text)
		}
	}
	return s, 0, fmt.Errorf("unclosed braces")
}

func TestSelectors(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up{job="speaker"} == 0`, []string{`up{job="speaker"}`}},
		{`max(herald_controller_leader) < 1 or absent(herald_controller_leader)`, []string{"herald_controller_leader", "herald_controller_leader"}},
		{"max by (pool, family) (a_in_use)\n  / (max by (pool, family) (a_total) > 0) >= 0.9", []string{"a_in_use", "a_total"}},
		{`histogram_quantile(0.95, sum by (le, kind) (rate(d_bucket[5m])))`, []string{"d_bucket"}},
		{`sum(rate(x_total{instance=~"n.*", job!="p"}[$__rate_interval])) by (instance) > bool 1`, []string{`x_total{instance=~"n.*",job!="p"}`}},
		{`label_replace(max by (reason) (u), "protocol", "layer2", "", "") or label_replace(v, "p", "b", "", "")`, []string{"u", "v"}},
		{`a * on (instance) group_left (node) b offset 5m unless c @ start()`, []string{"a", "b", "c"}},
		{`{__name__="n:rate5m", job='s\'q'}`, []string{`n:rate5m{job="s'q"}`}},
		{`time() - last_seconds > 300 # a comment naming no_metric`, []string{"last_seconds"}},
		{`max_over_time(deriv(g[10m:1m])[1h:]) or vector(0) + Inf`, []string{"g"}},
		{`sum without (a) (m) / count(m)`, []string{"m", "m"}},
	} {
		got, err := selectors(tc.expr)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		var names []string
		for _, s := range got {
			names = append(names, s.String())
		}
		if !slices.Equal(names, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.expr, names, tc.want)
		}
	}
	for _, bad := range []string{`x{job="a"`, `rate(x[5m)`, `x{job=a}`, `"open`} {
		if got, err := selectors(bad); err == nil {
			t.Errorf("%s: no error, %v", bad, got)
		}
	}
}
