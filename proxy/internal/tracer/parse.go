package tracer

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/herald-lb/herald/proxy/iptables"
)

// ParseError points at the restore line the parser could not accept.
type ParseError struct {
	Doc  int // 1-based index of the document passed to Parse
	Line int // 1-based line number within it
	Text string
	Msg  string
}

func (e *ParseError) Error() string {
	if e.Text == "" {
		return fmt.Sprintf("document %d line %d: %s", e.Doc, e.Line, e.Msg)
	}
	return fmt.Sprintf("document %d line %d: %s: %q", e.Doc, e.Line, e.Msg, e.Text)
}

var builtinChains = map[string][]string{
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"mangle": {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
	"raw":    {"PREROUTING", "OUTPUT"},
}

// targets the tracer understands, and the tables they are valid in.
var builtinTargets = map[string][]string{
	"ACCEPT":     nil,
	"DROP":       nil,
	"RETURN":     nil,
	"MARK":       nil,
	"REJECT":     {"filter"},
	"DNAT":       {"nat"},
	"MASQUERADE": {"nat"},
}

type table struct {
	name   string
	chains map[string]*chain
}

type chain struct {
	name    string
	builtin bool
	policy  string // built-in chains only
	rules   []*rule
}

type rule struct {
	where string // "doc:line" for trails
	text  string // normalised rule text
	table string
	chain string

	matches []match
	comment string

	target string
	isGoto bool

	// target options
	markOp     string // "or", "xor", "set"
	markVal    uint32
	markMask   uint32
	toDest     netip.AddrPort
	toDestPort bool // whether --to-destination had a port
	rejectWith string
}

// Tracer holds parsed tables and simulates packets through them.
type Tracer struct {
	tables map[string]*table
	v4, v6 bool
	local  map[netip.Addr]bool
}

// Parse reads one or more iptables-restore documents and applies them in
// order with --noflush semantics: declaring an existing chain flushes it,
// -A appends, -X deletes. That lets a test layer a partial render on top of
// a full one exactly as the kernel would. Only the subset herald emits is
// accepted; anything else is a *ParseError.
func Parse(docs ...string) (*Tracer, error) {
	t := &Tracer{tables: map[string]*table{}, local: map[netip.Addr]bool{}}
	for i, d := range docs {
		if err := t.apply(i+1, d); err != nil {
			return nil, err
		}
	}
	if t.v4 && t.v6 {
		return nil, fmt.Errorf("the rules mix IPv4 and IPv6 addresses; iptables and ip6tables rules must be traced separately")
	}
	return t, nil
}

// SetLocalAddrs declares the node's own addresses. They decide where a
// DNATed packet is delivered (INPUT vs FORWARD) and whether a source counts
// as addrtype LOCAL.
func (t *Tracer) SetLocalAddrs(addrs ...netip.Addr) {
	for _, a := range addrs {
		t.local[a.Unmap()] = true
	}
}

func (t *Tracer) apply(doc int, text string) error {
	var cur *table
	var curLine int
	for l, err := range iptables.Lines([]byte(text)) {
		if err != nil {
			return docError(doc, err)
		}
		perr := func(format string, args ...any) error {
			return &ParseError{Doc: doc, Line: l.Num, Text: strings.TrimSpace(string(l.Raw)), Msg: fmt.Sprintf(format, args...)}
		}
		name := string(l.Name)
		switch {
		case l.Kind == iptables.LineBlank:
		case l.Kind == iptables.LineTable:
			if cur != nil {
				return perr("table %q started before COMMIT of table %q", name, cur.name)
			}
			if _, ok := builtinChains[name]; !ok {
				return perr("unknown table %q", name)
			}
			cur = t.table(name)
			curLine = l.Num
		case l.Kind == iptables.LineCommit:
			if cur == nil {
				return perr("COMMIT outside a table")
			}
			if err := t.checkRefs(cur); err != nil {
				return perr("%v", err)
			}
			cur = nil
		case cur == nil:
			return perr("line outside a table (missing *filter or *nat?)")
		case l.Kind == iptables.LineChain:
			if err := declare(cur, name, string(l.Policy)); err != nil {
				return perr("%v", err)
			}
		case l.Kind == iptables.LineRule:
			c, ok := cur.chains[name]
			if !ok {
				return perr("chain %q does not exist in table %s", name, cur.name)
			}
			args, err := l.Args()
			if err != nil {
				return docError(doc, err)
			}
			r, err := t.parseRule(cur.name, name, args)
			if err != nil {
				return perr("%v", err)
			}
			r.where = fmt.Sprintf("%d:%d", doc, l.Num)
			r.text = iptables.JoinArgs(append([]string{"-A", name}, args...))
			c.rules = append(c.rules, r)
		case l.Kind == iptables.LineDelete:
			if err := deleteChain(cur, name); err != nil {
				return perr("%v", err)
			}
		}
	}
	if cur != nil {
		return &ParseError{Doc: doc, Line: curLine, Text: "*" + cur.name, Msg: "table is never COMMITted"}
	}
	return nil
}

// docError turns the line reader's *iptables.SyntaxError into a
// *ParseError of document doc.
func docError(doc int, err error) error {
	var se *iptables.SyntaxError
	if !errors.As(err, &se) {
		return err
	}
	return &ParseError{Doc: doc, Line: se.Line, Text: se.Text, Msg: se.Msg}
}

// declare applies ":name policy": a built-in chain takes the policy, a
// user-defined one is created, or flushed as --noflush does.
func declare(tb *table, name, policy string) error {
	if err := validChainName(name); err != nil {
		return err
	}
	c, ok := tb.chains[name]
	switch {
	case ok && c.builtin:
		if policy != "-" && policy != "ACCEPT" && policy != "DROP" {
			return fmt.Errorf("policy %q of built-in chain must be ACCEPT or DROP", policy)
		}
		if policy != "-" {
			c.policy = policy
		}
	case policy != "-":
		return fmt.Errorf("user-defined chain %q cannot have a policy", name)
	case ok:
		c.rules = nil // --noflush: a declaration flushes the chain
	default:
		tb.chains[name] = &chain{name: name}
	}
	return nil
}

// deleteChain applies "-X name" as iptables-restore would.
func deleteChain(tb *table, name string) error {
	c, ok := tb.chains[name]
	switch {
	case !ok:
		return fmt.Errorf("cannot delete chain %q: no such chain", name)
	case c.builtin:
		return fmt.Errorf("cannot delete built-in chain %q", name)
	case len(c.rules) > 0:
		return fmt.Errorf("cannot delete chain %q: it still has %d rules", name, len(c.rules))
	}
	delete(tb.chains, name)
	return nil
}

func (t *Tracer) table(name string) *table {
	if tb, ok := t.tables[name]; ok {
		return tb
	}
	tb := &table{name: name, chains: map[string]*chain{}}
	for _, c := range builtinChains[name] {
		tb.chains[c] = &chain{name: c, builtin: true, policy: "ACCEPT"}
	}
	t.tables[name] = tb
	return tb
}

// checkRefs is what iptables-restore does at COMMIT: every jump must land
// on an existing chain.
func (t *Tracer) checkRefs(tb *table) error {
	for _, c := range tb.chains {
		for _, r := range c.rules {
			if r.target == "" {
				continue
			}
			if _, ok := builtinTargets[r.target]; ok {
				continue
			}
			dst, ok := tb.chains[r.target]
			if !ok {
				return fmt.Errorf("rule %s in %s jumps to %q, which does not exist in table %s", r.where, c.name, r.target, tb.name)
			}
			if dst.builtin {
				return fmt.Errorf("rule %s in %s jumps to built-in chain %q", r.where, c.name, r.target)
			}
		}
	}
	return nil
}

func validChainName(n string) error {
	if n == "" || len(n) > 28 {
		return fmt.Errorf("chain name %q must be 1-28 characters", n)
	}
	if strings.HasPrefix(n, "-") || strings.HasPrefix(n, "!") || strings.ContainsAny(n, " \t\"'") {
		return fmt.Errorf("invalid chain name %q", n)
	}
	return nil
}

// module collects the options of one "-m NAME" until the next -m or -j.
type module struct {
	name string
	opts map[string]string
	neg  map[string]bool
}

var moduleOpts = map[string][]string{
	"comment":   {"--comment"},
	"tcp":       {"--dport", "--sport"},
	"udp":       {"--dport", "--sport"},
	"sctp":      {"--dport", "--sport"},
	"addrtype":  {"--dst-type", "--src-type"},
	"statistic": {"--mode", "--probability"},
	"recent":    {"--name", "--rcheck", "--set", "--update", "--remove", "--seconds", "--reap", "--rsource"},
	"mark":      {"--mark"},
	"conntrack": {"--ctstate"},
}

// flag options take no value.
var flagOpts = map[string]bool{"--rcheck": true, "--set": true, "--update": true, "--remove": true, "--reap": true, "--rsource": true}

// negatable options may follow "!".
var negatable = map[string]bool{"--dport": true, "--sport": true, "--dst-type": true, "--src-type": true, "--mark": true, "--ctstate": true}

func (t *Tracer) parseRule(tableName, chainName string, toks []string) (*rule, error) {
	r := &rule{table: tableName, chain: chainName}
	var mods []*module
	var cur *module
	proto := ""
	neg := false
	i := 0
	next := func(opt string) (string, error) {
		if i+1 >= len(toks) {
			return "", fmt.Errorf("%s needs a value", opt)
		}
		i++
		return toks[i], nil
	}
	for ; i < len(toks); i++ {
		tok := toks[i]
		if tok == "!" {
			if neg {
				return nil, fmt.Errorf("double negation")
			}
			neg = true
			continue
		}
		switch tok {
		case "-s", "--source", "-d", "--destination":
			v, err := next(tok)
			if err != nil {
				return nil, err
			}
			p, err := t.parsePrefix(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", tok, err)
			}
			r.matches = append(r.matches, addrMatch{src: tok == "-s" || tok == "--source", prefix: p, neg: neg})
			neg = false
		case "-p", "--protocol":
			v, err := next(tok)
			if err != nil {
				return nil, err
			}
			v = strings.ToLower(v)
			switch v {
			case "tcp", "udp", "sctp":
			default:
				return nil, fmt.Errorf("unsupported protocol %q", v)
			}
			if proto != "" {
				return nil, fmt.Errorf("-p given twice")
			}
			proto = v
			r.matches = append(r.matches, protoMatch{proto: v, neg: neg})
			neg = false
		case "-m", "--match":
			if neg {
				return nil, fmt.Errorf("! before -m")
			}
			v, err := next(tok)
			if err != nil {
				return nil, err
			}
			if _, ok := moduleOpts[v]; !ok {
				return nil, fmt.Errorf("unsupported match module %q", v)
			}
			cur = &module{name: v, opts: map[string]string{}, neg: map[string]bool{}}
			mods = append(mods, cur)
		case "-j", "--jump", "-g", "--goto":
			if neg {
				return nil, fmt.Errorf("! before %s", tok)
			}
			v, err := next(tok)
			if err != nil {
				return nil, err
			}
			r.target, r.isGoto = v, tok == "-g" || tok == "--goto"
			if err := r.parseTarget(toks[i+1:]); err != nil {
				return nil, err
			}
			if r.toDest.IsValid() {
				t.noteFamily(r.toDest.Addr())
			}
			switch {
			case strings.HasPrefix(r.rejectWith, "icmp6-"):
				t.v6 = true
			case strings.HasPrefix(r.rejectWith, "icmp-"):
				t.v4 = true
			}
			i = len(toks)
		default:
			if !strings.HasPrefix(tok, "--") {
				return nil, fmt.Errorf("unexpected %q", tok)
			}
			// --dport/--sport may follow a bare -p like in iptables(8).
			m := cur
			if (tok == "--dport" || tok == "--sport") && (m == nil || !slices.Contains(moduleOpts[m.name], tok)) {
				if proto == "" {
					return nil, fmt.Errorf("%s needs -p tcp, udp or sctp", tok)
				}
				m = &module{name: proto, opts: map[string]string{}, neg: map[string]bool{}}
				mods = append(mods, m)
			}
			if m == nil || !slices.Contains(moduleOpts[m.name], tok) {
				return nil, fmt.Errorf("option %s does not belong to a loaded match module", tok)
			}
			if _, dup := m.opts[tok]; dup {
				return nil, fmt.Errorf("%s given twice", tok)
			}
			if neg && !negatable[tok] {
				return nil, fmt.Errorf("%s cannot be negated", tok)
			}
			val := ""
			if !flagOpts[tok] {
				v, err := next(tok)
				if err != nil {
					return nil, err
				}
				val = v
			}
			m.opts[tok], m.neg[tok] = val, neg
			neg = false
		}
	}
	if neg {
		return nil, fmt.Errorf("a trailing ! negates nothing")
	}
	for _, m := range mods {
		ms, err := m.build(r, proto)
		if err != nil {
			return nil, err
		}
		r.matches = append(r.matches, ms...)
	}
	if r.target != "" {
		if tables, ok := builtinTargets[r.target]; ok && tables != nil && !slices.Contains(tables, tableName) {
			return nil, fmt.Errorf("target %s is not valid in table %s", r.target, tableName)
		}
		if r.target == "DNAT" || r.target == "MASQUERADE" {
			if r.target == "DNAT" && r.toDestPort && proto == "" {
				return nil, fmt.Errorf("DNAT to a port needs -p")
			}
		}
		if err := validChainName(r.target); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (t *Tracer) parsePrefix(v string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(v, "/") {
		var err error
		if p, err = netip.ParsePrefix(v); err != nil {
			return p, err
		}
		p = p.Masked()
	} else {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return p, err
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	t.noteFamily(p.Addr())
	return p, nil
}

func (t *Tracer) noteFamily(a netip.Addr) {
	if a.Is4() {
		t.v4 = true
	} else {
		t.v6 = true
	}
}

func (m *module) build(r *rule, proto string) ([]match, error) {
	switch m.name {
	case "comment":
		c, ok := m.opts["--comment"]
		if !ok {
			return nil, fmt.Errorf("-m comment needs --comment")
		}
		if r.comment != "" {
			r.comment += "; "
		}
		r.comment += c
		return nil, nil
	case "tcp", "udp", "sctp":
		if proto != m.name {
			return nil, fmt.Errorf("-m %s needs -p %s", m.name, m.name)
		}
		var out []match
		for _, opt := range []string{"--dport", "--sport"} {
			v, ok := m.opts[opt]
			if !ok {
				continue
			}
			lo, hi, err := portRange(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", opt, err)
			}
			out = append(out, portMatch{src: opt == "--sport", lo: lo, hi: hi, neg: m.neg[opt]})
		}
		return out, nil
	case "addrtype":
		var out []match
		for _, opt := range []string{"--src-type", "--dst-type"} {
			v, ok := m.opts[opt]
			if !ok {
				continue
			}
			if v != "LOCAL" {
				return nil, fmt.Errorf("%s %s: only LOCAL is supported", opt, v)
			}
			out = append(out, addrtypeMatch{src: opt == "--src-type", neg: m.neg[opt]})
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("-m addrtype needs --src-type or --dst-type")
		}
		return out, nil
	case "statistic":
		if m.opts["--mode"] != "random" {
			return nil, fmt.Errorf("-m statistic: only --mode random is supported")
		}
		p, err := strconv.ParseFloat(m.opts["--probability"], 64)
		if err != nil || p < 0 || p > 1 {
			return nil, fmt.Errorf("-m statistic: --probability must be a number in [0,1], got %q", m.opts["--probability"])
		}
		return []match{statMatch{p: p}}, nil
	case "recent":
		name, ok := m.opts["--name"]
		if !ok || name == "" {
			name = "DEFAULT"
		}
		var mode string
		for _, o := range []string{"--rcheck", "--set", "--update", "--remove"} {
			if _, ok := m.opts[o]; ok {
				if mode != "" {
					return nil, fmt.Errorf("-m recent: %s and %s are exclusive", mode, o)
				}
				mode = o
			}
		}
		if mode == "" {
			return nil, fmt.Errorf("-m recent needs one of --rcheck, --set, --update, --remove")
		}
		if s, ok := m.opts["--seconds"]; ok {
			if n, err := strconv.Atoi(s); err != nil || n < 1 {
				return nil, fmt.Errorf("-m recent: --seconds must be a positive integer, got %q", s)
			}
		}
		if _, ok := m.opts["--reap"]; ok {
			if _, ok := m.opts["--seconds"]; !ok {
				return nil, fmt.Errorf("-m recent: --reap needs --seconds")
			}
		}
		return []match{recentMatch{name: name, mode: mode}}, nil
	case "mark":
		v, mask, err := markValue(m.opts["--mark"])
		if err != nil {
			return nil, fmt.Errorf("-m mark: %v", err)
		}
		return []match{markMatch{val: v, mask: mask, neg: m.neg["--mark"]}}, nil
	case "conntrack":
		v, ok := m.opts["--ctstate"]
		if !ok {
			return nil, fmt.Errorf("-m conntrack needs --ctstate")
		}
		states := strings.Split(v, ",")
		for _, s := range states {
			switch s {
			case "NEW", "ESTABLISHED", "RELATED", "INVALID", "UNTRACKED", "SNAT", "DNAT":
			default:
				return nil, fmt.Errorf("-m conntrack: unknown state %q", s)
			}
		}
		return []match{ctMatch{states: states, neg: m.neg["--ctstate"]}}, nil
	}
	return nil, fmt.Errorf("unsupported match module %q", m.name)
}

func portRange(v string) (uint16, uint16, error) {
	lo, hi, isRange := strings.Cut(v, ":")
	a, err := strconv.ParseUint(lo, 10, 16)
	if err != nil {
		return 0, 0, fmt.Errorf("bad port %q", v)
	}
	b := a
	if isRange {
		if b, err = strconv.ParseUint(hi, 10, 16); err != nil || b < a {
			return 0, 0, fmt.Errorf("bad port range %q", v)
		}
	}
	return uint16(a), uint16(b), nil
}

func markValue(v string) (val, mask uint32, err error) {
	if v == "" {
		return 0, 0, fmt.Errorf("missing mark value")
	}
	vs, ms, hasMask := strings.Cut(v, "/")
	x, err := strconv.ParseUint(vs, 0, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("bad mark %q", v)
	}
	m := uint64(0xffffffff)
	if hasMask {
		if m, err = strconv.ParseUint(ms, 0, 32); err != nil {
			return 0, 0, fmt.Errorf("bad mark mask %q", v)
		}
	}
	return uint32(x), uint32(m), nil
}

func (r *rule) parseTarget(opts []string) error {
	kv := map[string]string{}
	for i := 0; i < len(opts); i++ {
		o := opts[i]
		if !strings.HasPrefix(o, "--") {
			return fmt.Errorf("unexpected %q after -j %s", o, r.target)
		}
		if _, dup := kv[o]; dup {
			return fmt.Errorf("%s given twice", o)
		}
		switch o {
		case "--random-fully", "--random":
			kv[o] = ""
		default:
			if i+1 >= len(opts) {
				return fmt.Errorf("%s needs a value", o)
			}
			kv[o] = opts[i+1]
			i++
		}
	}
	allowed := map[string][]string{
		"MARK":       {"--or-mark", "--xor-mark", "--set-xmark", "--set-mark"},
		"DNAT":       {"--to-destination"},
		"MASQUERADE": {"--random-fully", "--random"},
		"REJECT":     {"--reject-with"},
	}[r.target]
	for o := range kv {
		if !slices.Contains(allowed, o) {
			return fmt.Errorf("option %s is not supported for target %s", o, r.target)
		}
	}
	switch r.target {
	case "MARK":
		if len(kv) != 1 {
			return fmt.Errorf("MARK needs exactly one of --or-mark, --xor-mark, --set-xmark, --set-mark")
		}
		for o, v := range kv {
			val, mask, err := markValue(v)
			if err != nil {
				return fmt.Errorf("MARK %s: %v", o, err)
			}
			switch o {
			case "--or-mark":
				r.markOp, r.markVal = "or", val
			case "--xor-mark":
				r.markOp, r.markVal = "xor", val
			default: // --set-xmark / --set-mark: zero the mask bits, then xor
				r.markOp, r.markVal, r.markMask = "set", val, mask
			}
		}
	case "DNAT":
		v, ok := kv["--to-destination"]
		if !ok {
			return fmt.Errorf("DNAT needs --to-destination")
		}
		if ap, err := netip.ParseAddrPort(v); err == nil {
			if ap.Port() == 0 {
				return fmt.Errorf("DNAT --to-destination %q: port 0", v)
			}
			r.toDest, r.toDestPort = ap, true
		} else if a, err2 := netip.ParseAddr(strings.Trim(v, "[]")); err2 == nil {
			r.toDest = netip.AddrPortFrom(a, 0)
		} else {
			return fmt.Errorf("DNAT --to-destination %q: %v", v, err)
		}
	case "REJECT":
		if w, ok := kv["--reject-with"]; ok {
			switch w {
			case "icmp-port-unreachable", "icmp-net-unreachable", "icmp-host-unreachable", "icmp-admin-prohibited", "tcp-reset",
				"icmp6-port-unreachable", "icmp6-adm-prohibited", "icmp6-addr-unreachable", "icmp6-no-route":
			default:
				return fmt.Errorf("REJECT --reject-with %q is not supported", w)
			}
			r.rejectWith = w
		}
	}
	return nil
}
