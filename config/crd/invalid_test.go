package crd

import (
	"bufio"
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const invalidDir = "../samples/invalid-schema"

// invalidSample is one file of config/samples/invalid-schema: a single object
// the API server must refuse, and where and how it must say so.
type invalidSample struct {
	field  string // "# field:" header, the error's field path
	expect string // "# expect:" header, a substring of the error
	obj    map[string]any
}

// readInvalidSample parses the header comments and the object of one file.
func readInvalidSample(t *testing.T, path string) invalidSample {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s invalidSample
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "#") {
			break // headers come first
		}
		text := strings.TrimSpace(strings.TrimPrefix(line, "#"))
		if v, ok := strings.CutPrefix(text, "field:"); ok {
			s.field = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(text, "expect:"); ok {
			s.expect = strings.TrimSpace(v)
		}
	}
	if s.field == "" || s.expect == "" {
		t.Fatalf("%s must start with '# field: <path>' and '# expect: <message>' comment lines", path)
	}
	objs, err := ReadObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 {
		t.Fatalf("%s holds %d objects, want exactly one", path, len(objs))
	}
	s.obj = objs[0]
	return s
}

// TestInvalidSamplesAreRefused runs every file of samples/invalid-schema
// through the schema and requires an error on the declared field carrying
// the declared message. The e2e tests apply the same files to a real API
// server, so they must also look like objects a user would write.
func TestInvalidSamplesAreRefused(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(invalidDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 20 {
		t.Fatalf("%d files in %s, want at least 20", len(paths), invalidDir)
	}
	v := newValidator(t)
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			s := readInvalidSample(t, path)
			checkRealistic(t, s.obj)
			if strings.HasPrefix(s.field, "status") || strings.HasPrefix(s.field, "metadata") {
				t.Errorf("field %q: create ignores status and metadata mistakes are not schema tests", s.field)
			}
			errs := v.Validate(context.Background(), s.obj)
			if len(errs) == 0 {
				t.Fatalf("accepted, want an error on %s containing %q", s.field, s.expect)
			}
			// One mistake per file: every error must be the declared one, so
			// a file cannot pass on the strength of some other slip.
			found := false
			for _, e := range errs {
				if e.Field != s.field {
					t.Errorf("unexpected error on another field: %s", e)
				}
				found = found || strings.Contains(e.ErrorBody(), s.expect)
			}
			if !found {
				t.Fatalf("no error on %s containing %q; got:%s", s.field, s.expect, render(errs))
			}
		})
	}
}

// checkRealistic requires what a user's object has, and only addresses from
// the documentation ranges the lab may use.
func checkRealistic(t *testing.T, obj map[string]any) {
	t.Helper()
	if obj["apiVersion"] != "herald.io/v1beta1" {
		t.Errorf("apiVersion %v, want herald.io/v1beta1", obj["apiVersion"])
	}
	if k, _ := obj["kind"].(string); k == "" {
		t.Error("no kind")
	}
	meta, _ := obj["metadata"].(map[string]any)
	if name, _ := meta["name"].(string); name == "" {
		t.Error("no metadata.name")
	}
	if meta["namespace"] != "herald-system" {
		t.Errorf("metadata.namespace %v, want herald-system", meta["namespace"])
	}
	for _, a := range addressesIn(obj) {
		if !isDocumentationAddress(a) {
			t.Errorf("%s is outside the documentation ranges", a)
		}
	}
}

// addressesIn finds every IP address written in the object's strings, also
// inside CIDRs and ranges.
func addressesIn(v any) []netip.Addr {
	var out []netip.Addr
	switch v := v.(type) {
	case map[string]any:
		for _, x := range v {
			out = append(out, addressesIn(x)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, addressesIn(x)...)
		}
	case string:
		for _, part := range strings.Split(v, "-") {
			part, _, _ = strings.Cut(strings.TrimSpace(part), "/")
			if a, err := netip.ParseAddr(part); err == nil {
				out = append(out, a)
			}
		}
	}
	return out
}

var documentationPrefixes = []netip.Prefix{
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("2001:db8::/32"),
}

func isDocumentationAddress(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range documentationPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
