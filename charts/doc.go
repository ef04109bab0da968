// Package charts holds the tests of herald's Helm chart (charts/herald):
// its CRDs are config/crd/bases' and its image tag config/base's (always
// checked); `helm lint --strict` is clean and `helm template` renders the
// golden files in testdata/golden for the value sets in testdata/values,
// which decode as Kubernetes objects and run the same pods with the same
// privileges and grants as the matching kustomization (checked when
// HERALD_HELM names a helm binary: `make unit-test` (part of `make test`) and `make chart-test`
// install the pinned Helm and set it; without it those tests skip, saying
// so). `HERALD_HELM=bin/helm go test ./charts -update` rewrites the golden
// files.
package charts
