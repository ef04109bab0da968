package config

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/config/v1beta1"
)

// Skipped is a document a loader read but did not use, with the reason.
type Skipped struct {
	Source string // file:document-number
	Reason string
}

// Loader gathers herald objects from YAML streams into Resources.
type Loader struct {
	Resources Resources
	// Problems are objects that could not be decoded (typos in field names,
	// wrong types); they never reach the parser.
	Problems Problems
	Skipped  []Skipped
	// HasSecrets tells whether any Secret was read.
	HasSecrets bool
	// Schema, when set, checks each herald.io document as the API server
	// would; what it refuses goes to SchemaProblems. The object still goes
	// to the parser, so one run shows every problem.
	Schema         func(doc []byte) []FieldError
	SchemaProblems Problems
	// Objects counts the herald.io documents read.
	Objects int

	quietDecode bool
}

// FieldError is one schema violation.
type FieldError struct {
	Field, Message string
}

// LoadFiles reads every file (multi-document YAML, or "-" for stdin).
func (l *Loader) LoadFiles(paths []string) error {
	for _, path := range paths {
		var rd io.Reader
		if path == "-" {
			rd = os.Stdin
		} else {
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			rd = f
		}
		if err := l.Load(path, rd); err != nil {
			return err
		}
	}
	return nil
}

type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// Load reads one multi-document YAML stream. Syntax errors that make the
// rest of the stream unreadable are returned; problems with single objects
// are collected.
func (l *Loader) Load(source string, rd io.Reader) error {
	yr := utilyaml.NewYAMLReader(bufio.NewReader(rd))
	for n := 1; ; n++ {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: document %d: %v", source, n, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		where := fmt.Sprintf("%s:%d", source, n)
		var h header
		if err := yaml.Unmarshal(doc, &h); err != nil {
			return fmt.Errorf("%s: not valid YAML: %v", where, err)
		}
		if strings.HasSuffix(h.Kind, "List") {
			// `kubectl get -o yaml` output: check every item.
			var list struct {
				Items []json.RawMessage `json:"items"`
			}
			if err := yaml.Unmarshal(doc, &list); err != nil {
				return fmt.Errorf("%s: %s: %v", where, h.Kind, err)
			}
			for i, item := range list.Items {
				var ih header
				if err := yaml.Unmarshal(item, &ih); err != nil {
					return fmt.Errorf("%s: item %d: %v", where, i, err)
				}
				l.decode(fmt.Sprintf("%s item %d", where, i), ih, item)
			}
			continue
		}
		l.decode(where, h, doc)
	}
}

func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out.Write(line)
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}

func (l *Loader) decode(where string, h header, doc []byte) {
	if h.APIVersion == "v1" && h.Kind == "Secret" {
		var s corev1.Secret
		if l.strict(where, h, doc, &s) {
			// stringData is folded into data by the API server; do the same.
			if s.Data == nil {
				s.Data = map[string][]byte{}
			}
			for k, v := range s.StringData {
				s.Data[k] = []byte(v)
			}
			l.Resources.Secrets = append(l.Resources.Secrets, s)
			l.HasSecrets = true
		}
		return
	}
	group, _, _ := strings.Cut(h.APIVersion, "/")
	switch {
	case group == "metallb.io":
		l.Skipped = append(l.Skipped, Skipped{where, fmt.Sprintf("%s %s is MetalLB configuration, which herald does not read; write it as herald.io/v1beta1", h.Kind, h.Metadata.Name)})
		return
	case group != v1beta1.GroupVersion.Group:
		l.Skipped = append(l.Skipped, Skipped{where, fmt.Sprintf("%s %s (%s) is not herald configuration", h.Kind, h.Metadata.Name, h.APIVersion)})
		return
	case h.APIVersion != v1beta1.GroupVersion.String():
		l.Problems = append(l.Problems, Problem{Kind: h.Kind, Namespace: h.Metadata.Namespace, Name: h.Metadata.Name, Field: "apiVersion",
			Message: fmt.Sprintf("%s is not served; use %s", h.APIVersion, v1beta1.GroupVersion)})
		return
	}
	if knownKind(h.Kind) {
		l.Objects++
	}
	if l.Schema != nil && knownKind(h.Kind) {
		errs := l.Schema(doc)
		for _, e := range errs {
			l.SchemaProblems = append(l.SchemaProblems, Problem{Kind: h.Kind, Namespace: h.Metadata.Namespace, Name: h.Metadata.Name,
				Field: e.Field, Message: e.Message})
		}
		// The schema names the exact field of an unknown or mistyped value;
		// the Go decoder's own complaint would only repeat it less precisely.
		l.quietDecode = len(errs) > 0
	}
	r := &l.Resources
	switch h.Kind {
	case KindIPAddressPool:
		decodeInto(l, where, h, doc, &r.Pools)
	case KindL2Advertisement:
		decodeInto(l, where, h, doc, &r.L2Advertisements)
	case KindBGPAdvertisement:
		decodeInto(l, where, h, doc, &r.BGPAdvertisements)
	case KindBGPPeer:
		decodeInto(l, where, h, doc, &r.Peers)
	case KindCommunity:
		decodeInto(l, where, h, doc, &r.Communities)
	case KindBFDProfile:
		decodeInto(l, where, h, doc, &r.BFDProfiles)
	case "ServiceAnnouncement", "NodeAnnouncement":
		l.Skipped = append(l.Skipped, Skipped{where, h.Kind + " is written by the speakers, not configuration"})
	default:
		l.Problems = append(l.Problems, Problem{Kind: h.Kind, Namespace: h.Metadata.Namespace, Name: h.Metadata.Name, Field: "kind",
			Message: fmt.Sprintf("herald.io has no kind %q", h.Kind)})
	}
}

var goField = regexp.MustCompile(` into Go struct field [A-Za-z0-9]+\.([A-Za-z0-9.\[\]]+)`)

// decodeInto strictly decodes one object and appends it to the list of
// its kind.
func decodeInto[T any](l *Loader, where string, h header, doc []byte, list *[]T) {
	var o T
	if l.strict(where, h, doc, &o) {
		*list = append(*list, o)
	}
}

// strict decodes refusing unknown fields, so a misspelt field is reported
// instead of silently ignored.
func (l *Loader) strict(where string, h header, doc []byte, into any) bool {
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		if l.quietDecode {
			return false
		}
		msg := err.Error()
		msg = strings.TrimPrefix(msg, "error unmarshaling JSON: while decoding JSON: ")
		msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
		msg = strings.TrimPrefix(msg, "json: ")
		// A value of the wrong type or size: name the field as the API
		// server would ("Go struct field BGPPeerSpec.spec.myASN").
		var field string
		if m := goField.FindStringSubmatch(msg); m != nil {
			field = m[1]
			msg = strings.Replace(msg, m[0], " into a field", 1)
		}
		l.Problems = append(l.Problems, Problem{Kind: h.Kind, Namespace: h.Metadata.Namespace, Name: h.Metadata.Name,
			Field: field, Message: fmt.Sprintf("cannot be read (%s): %s", where, msg)})
		return false
	}
	return true
}

func knownKind(kind string) bool {
	switch kind {
	case KindIPAddressPool, KindL2Advertisement, KindBGPAdvertisement, KindBGPPeer, KindCommunity, KindBFDProfile:
		return true
	}
	return false
}
