package proxy

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/herald-lb/herald/proxy/kubeproxyconfig"
)

// applyConfigFile reads --config and sets through fs each flag a field
// translates to, unless the command line set it: a flag given explicitly
// wins over the file (kube-proxy v1.34 lets only -v and
// --hostname-override win, and ignores its other flags next to --config).
// allowed names the flags the file may set here; a field for another
// flag is left out with a warning. A field herald cannot honour without
// serving traffic differently, or a value the flag refuses, is an error
// naming the file and the field.
func applyConfigFile(fs *pflag.FlagSet, o *Options, allowed map[string]bool) error {
	data, err := os.ReadFile(o.ConfigFile)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	o.configDigest = sha256.Sum256(data)
	c, err := kubeproxyconfig.Parse(o.ConfigFile, data)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	tr := c.Translate()
	var errs []error
	for _, f := range tr.Findings {
		if f.Severity == kubeproxyconfig.Error {
			errs = append(errs, fmt.Errorf("--config: %s: %s: %s", o.ConfigFile, f.Field, f.Message))
		} else {
			o.ConfigWarnings = append(o.ConfigWarnings, f.Field+": "+f.Message)
		}
	}
	given := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { given[f.Name] = true })
	o.fromFile = map[string]string{}
	for _, f := range tr.Flags {
		switch {
		case given[f.Name]:
			o.ConfigNotes = append(o.ConfigNotes, fmt.Sprintf("%s: --%s on the command line wins", f.Field, f.Name))
		case !allowed[f.Name]:
			o.ConfigWarnings = append(o.ConfigWarnings, fmt.Sprintf("%s: left out: this command runs the proxy with its own --%s", f.Field, f.Name))
		default:
			// The value's own error: pflag's Set would wrap it in one
			// naming the flag, which the file did not set.
			fl := fs.Lookup(f.Name)
			if err := fl.Value.Set(f.Value); err != nil {
				errs = append(errs, fmt.Errorf("--config: %s: %s: %q: %v", o.ConfigFile, f.Field, f.Value, err))
				continue
			}
			fl.Changed = true
			o.fromFile[f.Name] = f.Field
		}
	}
	return errors.Join(errs...)
}

// origin names the file field a flag's value came from, for messages.
func (o Options) origin(flag string) string {
	if field, ok := o.fromFile[flag]; ok {
		return fmt.Sprintf(" (from %s, %s)", o.ConfigFile, field)
	}
	return ""
}

// logConfigFile says what of --config herald left out, and which flags
// won over it.
func logConfigFile(log *slog.Logger, o Options) {
	for _, w := range o.ConfigWarnings {
		log.Warn("kube-proxy configuration: field not honoured", "file", o.ConfigFile, "field", w)
	}
	for _, n := range o.ConfigNotes {
		log.Info("kube-proxy configuration: flag wins over field", "file", o.ConfigFile, "field", n)
	}
}

// attribute adds to each error naming a flag ("--name: ...") the --config
// field the flag's value came from.
func (o Options) attribute(errs []error) []error {
	var out []error
	for _, err := range errs {
		var parts []error
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			parts = j.Unwrap()
		} else {
			parts = []error{err}
		}
		for _, e := range parts {
			flag, rest, ok := strings.Cut(strings.TrimPrefix(e.Error(), "--"), ": ")
			if o := o.origin(flag); ok && o != "" && strings.HasPrefix(e.Error(), "--") {
				e = fmt.Errorf("--%s%s: %s", flag, o, rest)
			}
			out = append(out, e)
		}
	}
	return out
}
