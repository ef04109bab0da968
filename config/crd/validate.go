package crd

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	schemacel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

//go:embed bases/*.yaml
var bases embed.FS

// Files returns the generated CRD manifests keyed by file name, as built into
// the binary from bases/.
func Files() (map[string][]byte, error) {
	files := map[string][]byte{}
	err := fs.WalkDir(bases, "bases", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := bases.ReadFile(p)
		if err != nil {
			return err
		}
		files[d.Name()] = data
		return nil
	})
	return files, err
}

// Definitions parses every generated CRD.
func Definitions() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := Files()
	if err != nil {
		return nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for name, data := range files {
		crd, err := ParseDefinition(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// ParseDefinition decodes one CRD manifest and applies the API server's v1
// defaults. Unknown and duplicate fields are errors, as with the server's
// strict field validation that kubectl asks for by default.
func ParseDefinition(data []byte) (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return nil, err
	}
	if crd.APIVersion != apiextensionsv1.SchemeGroupVersion.String() || crd.Kind != "CustomResourceDefinition" {
		return nil, fmt.Errorf("not an %s CustomResourceDefinition: apiVersion %q, kind %q",
			apiextensionsv1.SchemeGroupVersion, crd.APIVersion, crd.Kind)
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
	return crd, nil
}

// ValidateDefinition runs the checks the API server makes when a CRD is
// created: structural schema, allowed formats and defaults, and compilation
// and cost estimation of every CEL rule.
func ValidateDefinition(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) (field.ErrorList, error) {
	internal := &apiextensionsinternal.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, internal, nil); err != nil {
		return nil, fmt.Errorf("converting %s to the internal version: %w", crd.Name, err)
	}
	// The create strategy resets what users may not set before validating.
	internal.Status = apiextensionsinternal.CustomResourceDefinitionStatus{}
	internal.Generation = 1
	for _, v := range internal.Spec.Versions {
		if v.Storage {
			internal.Status.StoredVersions = []string{v.Name}
			break
		}
	}
	return crdvalidation.ValidateCustomResourceDefinition(ctx, internal), nil
}

// kindSchema is what the API server builds per served version of a CRD.
type kindSchema struct {
	namespaced bool
	structural *structuralschema.Structural
	openAPI    apiservervalidation.SchemaValidator
	cel        *schemacel.Validator // nil when the schema has no rules
}

// Validator checks custom objects against CRD schemas the way the API server
// does on create: decode (dropping and reporting unknown fields), apply
// schema defaults, then validate metadata, OpenAPI, list types and CEL.
type Validator struct {
	kinds map[schema.GroupVersionKind]*kindSchema
}

// NewValidator builds a Validator for the given CRDs; with none, for every
// generated CRD in bases/.
func NewValidator(crds ...*apiextensionsv1.CustomResourceDefinition) (*Validator, error) {
	if len(crds) == 0 {
		var err error
		if crds, err = Definitions(); err != nil {
			return nil, err
		}
	}
	v := &Validator{kinds: map[schema.GroupVersionKind]*kindSchema{}}
	for _, crd := range crds {
		for _, ver := range crd.Spec.Versions {
			if !ver.Served || ver.Schema == nil {
				continue
			}
			ks, err := newKindSchema(ver.Schema, crd.Spec.Scope == apiextensionsv1.NamespaceScoped)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", crd.Name, ver.Name, err)
			}
			v.kinds[schema.GroupVersionKind{Group: crd.Spec.Group, Version: ver.Name, Kind: crd.Spec.Names.Kind}] = ks
		}
	}
	return v, nil
}

func newKindSchema(val *apiextensionsv1.CustomResourceValidation, namespaced bool) (*kindSchema, error) {
	internal := &apiextensionsinternal.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(val, internal, nil); err != nil {
		return nil, err
	}
	s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	// Like the server: the structural schema is shared, so defaults are
	// pruned on a copy.
	s = s.DeepCopy()
	if err := structuraldefaulting.PruneDefaults(s); err != nil {
		return nil, err
	}
	openAPI, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	return &kindSchema{
		namespaced: namespaced,
		structural: s,
		openAPI:    openAPI,
		cel:        schemacel.NewValidator(s, true, celconfig.PerCallLimit),
	}, nil
}

// Handles reports whether the Validator knows the object's apiVersion and
// kind.
func (v *Validator) Handles(obj map[string]any) bool {
	_, ok := v.kinds[(&unstructured.Unstructured{Object: obj}).GroupVersionKind()]
	return ok
}

// Validate checks one object as the API server would on create and returns
// every problem found. It defaults obj in place and removes unknown fields
// (reported as errors, like strict field validation). Unlike a create, it
// also validates status, so that schemas of status-only kinds are checked.
func (v *Validator) Validate(ctx context.Context, obj map[string]any) field.ErrorList {
	u := &unstructured.Unstructured{Object: obj}
	gvk := u.GroupVersionKind()
	ks, ok := v.kinds[gvk]
	if !ok {
		return field.ErrorList{field.NotSupported(field.NewPath("kind"), gvk.String(), v.known())}
	}

	errs := ks.decode(obj)
	if len(errs) > 0 {
		return errs
	}
	structuraldefaulting.Default(obj, ks.structural)

	// The same sequence as the custom resource strategy's Validate.
	errs = append(errs, metavalidation.ValidateObjectMetaAccessor(u, ks.namespaced, metavalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, ks.openAPI)...)
	errs = append(errs, schemaobjectmeta.Validate(nil, obj, ks.structural, false)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, ks.structural, obj)...)
	if ks.cel != nil {
		if blocking(errs) {
			// The server skips CEL here too: rules may assume bounds the
			// OpenAPI schema already refused.
			errs = append(errs, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
		} else {
			celErrs, _ := ks.cel.Validate(ctx, nil, ks.structural, obj, nil, celconfig.RuntimeCELCostBudget)
			errs = append(errs, celErrs...)
		}
	}
	return errs
}

// decode does what the server's decoder does to a custom resource: prune
// fields the schema does not declare and coerce metadata. Pruned fields are
// returned as errors because kubectl asks for strict field validation.
func (ks *kindSchema) decode(obj map[string]any) field.ErrorList {
	apiVersion, kind := obj["apiVersion"], obj["kind"]
	meta, hasMeta, unknown, err := schemaobjectmeta.GetObjectMetaWithOptions(obj, schemaobjectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: true})
	if err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("metadata"), nil, err.Error())}
	}
	unknown = append(unknown, pruning.PruneWithOptions(obj, ks.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})...)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, ks.structural)
	ferr, paths := schemaobjectmeta.CoerceWithOptions(nil, obj, ks.structural, false, schemaobjectmeta.CoerceOptions{ReturnUnknownFieldPaths: true})
	if ferr != nil {
		return field.ErrorList{ferr}
	}
	unknown = append(unknown, paths...)

	obj["apiVersion"], obj["kind"] = apiVersion, kind
	if hasMeta {
		if err := schemaobjectmeta.SetObjectMeta(obj, meta); err != nil {
			return field.ErrorList{field.Invalid(field.NewPath("metadata"), nil, err.Error())}
		}
	}

	var errs field.ErrorList
	for _, p := range unknown {
		errs = append(errs, field.Forbidden(field.NewPath(p), "unknown field (strict decoding error)"))
	}
	return errs
}

// blocking mirrors the server's rule for when CEL validation is skipped.
func blocking(errs field.ErrorList) bool {
	for _, err := range errs {
		switch err.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
	}
	return false
}

func (v *Validator) known() []string {
	var kinds []string
	for gvk := range v.kinds {
		kinds = append(kinds, gvk.String())
	}
	slices.Sort(kinds)
	return kinds
}

// ReadObjects splits multi-document YAML into objects, decoding numbers as
// the API server does (int64 when integral). Empty documents are skipped;
// duplicate keys are errors.
func ReadObjects(data []byte) ([]map[string]any, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []map[string]any
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if strings.TrimSpace(string(j)) == "null" {
			continue
		}
		var obj map[string]any
		if err := utiljson.Unmarshal(j, &obj); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		objs = append(objs, obj)
	}
}
