// Package flagusage is what herald's commands share around their pflag
// flag sets: the list of flags their help prints, each default said once
// (usage text that already gives the default, "(default: $POD_NAMESPACE
// or herald-system)", is not followed by another "(default ...)"), and
// the rewrite that keeps Go-flag-style one-dash long flags (-namespace=x)
// working.
package flagusage

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// Width is the column the flag descriptions are wrapped at.
const Width = 100

// indent starts each line of a flag's description.
const indent = "        "

// Write lists fs's flags on w, in GNU style: one line with the shorthand,
// the long name and the value's kind ("  -n, --namespace string"), then
// the description, indented, wrapped at Width, with its default.
func Write(w io.Writer, fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		fmt.Fprintln(w, Synopsis(f))
		for _, line := range wrap(Description(f), Width-len(indent)) {
			fmt.Fprintln(w, indent+line)
		}
	})
}

// Synopsis is a flag's first line: "  -n, --namespace string", or
// "      --kubeconfig string" without a shorthand.
func Synopsis(f *pflag.Flag) string {
	s := "      --" + f.Name
	if f.Shorthand != "" {
		s = "  -" + f.Shorthand + ", --" + f.Name
	}
	if arg := ArgName(f); arg != "" {
		s += " " + arg
	}
	return s
}

// ArgName is what a flag's value is called in help: the back-quoted word
// of its usage, else its type ("string", "duration", "int"); empty for a
// flag that needs no value (a boolean).
func ArgName(f *pflag.Flag) string {
	name, _ := pflag.UnquoteUsage(f)
	if name == "" && f.NoOptDefVal == "" {
		// A TextVar's type has no name: it still takes a value.
		name = "string"
	}
	return name
}

// Description is a flag's usage with its default, unless the usage gives
// the default itself or it is the zero value of the flag's type.
func Description(f *pflag.Flag) string {
	name, usage := pflag.UnquoteUsage(f)
	if strings.Contains(usage, "(default") || isZero(f) {
		return usage
	}
	if name == "string" || f.Value.Type() == "string" {
		return fmt.Sprintf("%s (default %q)", usage, f.DefValue)
	}
	return fmt.Sprintf("%s (default %s)", usage, f.DefValue)
}

// isZero tells whether a flag's default is its type's zero value, which
// is not printed.
func isZero(f *pflag.Flag) bool {
	return slices.Contains([]string{"", "0", "false", "0s", "[]"}, f.DefValue)
}

// wrap breaks s into lines of at most width characters at spaces (a
// longer word stays whole).
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) > width:
			lines, line = append(lines, line), word
		default:
			line += " " + word
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// Normalize rewrites the one-dash long flags of args, "-name",
// "-name=value", into pflag's "--name" form, when name is the long name
// of one of fs's flags. herald's command line was Go's flag package's
// before it was pflag's, and the flag package takes one dash or two for
// any flag, so command lines written then (-namespace=x, -kubeconfig F)
// keep their meaning; pflag alone would read "-namespace=x" as the
// shorthands -n -a ... and, where -n takes a value, set it to
// "amespace=x". One letter after the dash stays a shorthand (-n, -o
// json, -v=4, -A). The values of flags given without "=" are left alone,
// as is every argument after "--".
func Normalize(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		var f *pflag.Flag // the flag whose value may be the next argument
		switch {
		case strings.HasPrefix(a, "--"):
			name, _, _ := strings.Cut(a[2:], "=")
			f = fs.Lookup(name)
		case strings.HasPrefix(a, "-") && len(a) > 1:
			name, _, _ := strings.Cut(a[1:], "=")
			if long := fs.Lookup(name); long != nil && len(name) > 1 {
				a, f = "-"+a, long
				break
			}
			f = lastShorthand(fs, a[1:])
		}
		out = append(out, a)
		if f != nil && f.NoOptDefVal == "" && !strings.Contains(a, "=") && i+1 < len(args) {
			// The flag's value: never rewritten.
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// lastShorthand is the flag of a group of shorthands ("n", "An", "ojson",
// "v=4") that takes the next argument as its value: the first one that
// takes a value, when nothing follows it in the group.
func lastShorthand(fs *pflag.FlagSet, group string) *pflag.Flag {
	for i := 0; i < len(group); i++ {
		f := fs.ShorthandLookup(group[i : i+1])
		if f == nil || group[i] == '=' {
			return nil
		}
		if f.NoOptDefVal == "" {
			if i == len(group)-1 {
				return f
			}
			return nil // its value is the rest of the group
		}
	}
	return nil
}

// ParseFlags parses args on a new flag set called name with the flags
// define puts on it, then calls the finish define returned: a command's
// command line without cobra, for tests and tools. Flags only: an
// argument is an error. One-dash long flags are read as Normalize
// rewrites them; -h returns pflag.ErrHelp.
func ParseFlags(name string, args []string, out io.Writer, define func(*pflag.FlagSet) (finish func() error)) error {
	return ParseArgs(name, args, out, func(fs *pflag.FlagSet) func([]string) error {
		finish := define(fs)
		return func(pos []string) error {
			if len(pos) > 0 {
				return fmt.Errorf("unexpected argument %q: herald %s takes only flags", pos[0], name)
			}
			return finish()
		}
	})
}

// ParseArgs is ParseFlags for a command that takes arguments: complete,
// which define returns, gets them once the flags are parsed.
func ParseArgs(name string, args []string, out io.Writer, define func(*pflag.FlagSet) (complete func(pos []string) error)) error {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	if out == nil {
		out = io.Discard
	}
	fs.SetOutput(out)
	complete := define(fs)
	if err := fs.Parse(Normalize(fs, args)); err != nil {
		return err
	}
	return complete(fs.Args())
}
