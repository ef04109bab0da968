// Package crd holds the generated CustomResourceDefinitions (bases/, written
// by controller-gen from config/v1beta1) and checks them, and objects written
// against them, with the API server's own validation code. That lets unit
// tests prove, without an API server process, that the CRDs install and that
// their schemas (OpenAPI and CEL) accept and refuse what they should.
package crd
