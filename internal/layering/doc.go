// Package layering holds the test that keeps herald's packages in layers
// (docs/architecture.md): the three components — controller, speaker and
// proxy — never import one another; config and the internal helpers
// import no component; only the command line (internal/cli and
// cmd/herald) puts components together.
package layering
