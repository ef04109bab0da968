package iptables

import (
	"bytes"
	"errors"
	"fmt"
	"iter"
	"strings"
)

// This file is herald's one reader of iptables-save output and
// iptables-restore input: the Fake loads with it, the proxy's cleanup and
// jump repair read saves with it, rules.Prune finds unchanged chains with
// it and the test tracer builds its tables from it. It reads the line
// layer only (which kind of line, which table or chain, a rule's
// arguments); what the arguments mean is up to the caller.

// LineKind tells what a line of restore text is.
type LineKind uint8

// Line kinds. The zero value is a line Lines could not read.
const (
	LineInvalid LineKind = iota // comes with a *SyntaxError
	LineBlank                   // empty, or a # comment
	LineTable                   // *nat
	LineChain                   // :NAME POLICY [packets:bytes]
	LineRule                    // -A CHAIN args... (or --append)
	LineDelete                  // -X CHAIN (or --delete-chain)
	LineCommit                  // COMMIT
)

// Line is one line of restore text. Its byte slices alias the input
// (Lines allocates nothing per line, which rules.Prune counts on): copy
// what must outlive the input.
type Line struct {
	Kind LineKind
	Num  int // 1-based
	// Raw is the line as read, newline included, so the Raw of every
	// line, in order, gives the input back byte for byte.
	Raw []byte
	// Name is the table (LineTable) or the chain (LineChain, LineRule,
	// LineDelete).
	Name []byte
	// Policy and Counters are a LineChain's: "-" for a user-defined
	// chain, and "[packets:bytes]" or nothing.
	Policy, Counters []byte
	// Spec is what follows the chain in a LineRule, still quoted; Args
	// splits it.
	Spec []byte
}

// SyntaxError is a line that is not one of the forms Lines reads.
type SyntaxError struct {
	Line int    // 1-based
	Text string // the line, without surrounding blanks
	Msg  string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("line %d: %s: %q", e.Line, e.Msg, e.Text)
}

// Lines reads restore text line by line. A line it cannot read comes as
// LineInvalid with a *SyntaxError, and reading goes on: a strict caller
// stops at the first error, rules.Prune keeps such a line as it is.
func Lines(data []byte) iter.Seq2[Line, error] {
	return func(yield func(Line, error) bool) {
		for num := 1; len(data) > 0; num++ {
			raw := data
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				raw = data[:i+1]
			}
			data = data[len(raw):]
			l, err := parseLine(num, raw)
			if !yield(l, err) {
				return
			}
		}
	}
}

// Args splits a LineRule's Spec into its arguments, unquoted, the way
// iptables-restore does: blanks separate arguments; a double quote opens
// a quoted argument, in which a backslash takes the next byte as it is
// and the closing quote ends the argument. Outside quotes a backslash is
// an ordinary byte.
func (l Line) Args() ([]string, error) {
	args, err := splitArgs(l.Spec)
	if err != nil {
		return nil, l.syntaxError(err)
	}
	return args, nil
}

func (l Line) syntaxError(err error) *SyntaxError {
	return &SyntaxError{Line: l.Num, Text: string(trimBlanks(l.Raw)), Msg: err.Error()}
}

func parseLine(num int, raw []byte) (Line, error) {
	l := Line{Num: num, Raw: raw}
	text := trimBlanks(raw)
	var err error
	switch {
	case len(text) == 0 || text[0] == '#':
		l.Kind = LineBlank
	case text[0] == '*':
		err = l.readTable(text[1:])
	case text[0] == ':':
		err = l.readChain(text[1:])
	case string(text) == "COMMIT":
		l.Kind = LineCommit
	case text[0] == '-':
		err = l.readCommand(text)
	default:
		err = errors.New("unsupported line")
	}
	if err != nil {
		l.Kind = LineInvalid
		return l, l.syntaxError(err)
	}
	return l, nil
}

func (l *Line) readTable(text []byte) error {
	if len(text) == 0 || bytes.ContainsAny(text, " \t") {
		return errors.New("a table header is *NAME")
	}
	l.Kind, l.Name = LineTable, text
	return nil
}

func (l *Line) readChain(text []byte) error {
	name, rest := cutField(text)
	policy, rest := cutField(rest)
	counters, rest := cutField(rest)
	switch {
	case len(name) == 0 || len(policy) == 0:
		return errors.New("a chain declaration is :NAME POLICY [packets:bytes]")
	case len(counters) > 0 && !validCounters(counters):
		return fmt.Errorf("bad counters %q", counters)
	case len(rest) > 0:
		return fmt.Errorf("unexpected %q after the counters", rest)
	}
	l.Kind, l.Name, l.Policy, l.Counters = LineChain, name, policy, counters
	return nil
}

// validCounters tells "[packets:bytes]".
func validCounters(b []byte) bool {
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return false
	}
	packets, bytesN, ok := bytes.Cut(b[1:len(b)-1], []byte(":"))
	return ok && allDigits(packets) && allDigits(bytesN)
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

// readCommand reads the two commands iptables-save writes and herald
// renders; the tools take others (-I, -D, -F, -N, ...), herald's readers
// do not.
func (l *Line) readCommand(text []byte) error {
	cmd, rest := cutField(text)
	switch string(cmd) {
	case "-A", "--append":
		chain, spec := cutField(rest)
		if len(chain) == 0 {
			return fmt.Errorf("%s needs a chain", cmd)
		}
		l.Kind, l.Name, l.Spec = LineRule, chain, spec
	case "-X", "--delete-chain":
		chain, extra := cutField(rest)
		if len(chain) == 0 || len(extra) > 0 {
			return fmt.Errorf("%s takes exactly one chain", cmd)
		}
		l.Kind, l.Name = LineDelete, chain
	default:
		return fmt.Errorf("unsupported command %q", cmd)
	}
	return nil
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// trimBlanks drops blanks and the line end around a line.
func trimBlanks(b []byte) []byte {
	for len(b) > 0 && (isBlank(b[0]) || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	for len(b) > 0 && (isBlank(b[len(b)-1]) || b[len(b)-1] == '\r' || b[len(b)-1] == '\n') {
		b = b[:len(b)-1]
	}
	return b
}

// cutField returns the first blank-separated field of b and what follows
// it, without leading blanks. Names, policies and counters are never
// quoted, so no quote handling here.
func cutField(b []byte) (field, rest []byte) {
	for len(b) > 0 && isBlank(b[0]) {
		b = b[1:]
	}
	i := 0
	for i < len(b) && !isBlank(b[i]) {
		i++
	}
	field, rest = b[:i], b[i:]
	for len(rest) > 0 && isBlank(rest[0]) {
		rest = rest[1:]
	}
	return field, rest
}

func splitArgs(spec []byte) ([]string, error) {
	var args []string
	var cur []byte
	inArg, quoted := false, false
	for i := 0; i < len(spec); i++ {
		c := spec[i]
		switch {
		case quoted && c == '\\' && i+1 < len(spec):
			i++
			cur = append(cur, spec[i])
		case quoted && c == '"':
			// iptables-restore ends the argument here: `"a"b` is two.
			args, cur = append(args, string(cur)), cur[:0]
			quoted, inArg = false, false
		case quoted:
			cur = append(cur, c)
		case c == '"':
			quoted, inArg = true, true
		case isBlank(c):
			if inArg {
				args, cur = append(args, string(cur)), cur[:0]
				inArg = false
			}
		default:
			cur, inArg = append(cur, c), true
		}
	}
	if quoted {
		return nil, errors.New("unterminated quote")
	}
	if inArg {
		args = append(args, string(cur))
	}
	return args, nil
}

// JoinArgs writes arguments as a rule spec that Args splits back into the
// same arguments: an argument that is empty or holds a blank, a quote or
// a backslash is quoted, its quotes and backslashes escaped.
func JoinArgs(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a != "" && !strings.ContainsAny(a, " \t\"\\") {
			b.WriteString(a)
			continue
		}
		b.WriteByte('"')
		for j := 0; j < len(a); j++ {
			if a[j] == '"' || a[j] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(a[j])
		}
		b.WriteByte('"')
	}
	return b.String()
}
