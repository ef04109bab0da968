// Package flagusage prints a command's flags as the flag package does,
// but says each default once: usage text that already gives the default
// ("(default: $POD_NAMESPACE or herald-system)") is not followed by the
// flag package's own "(default "herald-system")".
package flagusage

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// PrintDefaults writes fs's flags to w.
func PrintDefaults(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		var b strings.Builder
		fmt.Fprintf(&b, "  -%s", f.Name)
		if name != "" {
			b.WriteString(" " + name)
		}
		if b.Len() <= 4 && name == "" { // a one-letter bool flag fits on the line
			b.WriteString("\t")
		} else {
			b.WriteString("\n    \t")
		}
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		if !strings.Contains(usage, "(default") && !isZero(f) {
			if name == "string" {
				fmt.Fprintf(&b, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(&b, " (default %v)", f.DefValue)
			}
		}
		fmt.Fprintln(w, b.String())
	})
}

// isZero tells whether a flag's default is its type's zero value, which
// the flag package does not print either.
func isZero(f *flag.Flag) bool {
	return slices.Contains([]string{"", "0", "false", "0s", "[]"}, f.DefValue)
}

// Output is where a command writes its usage: standard output when the
// user asked for help (-h, -help, --help), so it can be paged or piped,
// else standard error, next to the error it explains.
func Output(args []string) io.Writer {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			return os.Stdout
		}
	}
	return os.Stderr
}

// Parse parses args whose flags and positional arguments come in any
// order, as kubectl's do (`herald status default/web -o json`), and
// returns the positional ones; after "--" every argument is positional.
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}
