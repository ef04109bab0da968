// Package layering holds the test that keeps herald's packages in layers
// (docs/architecture.md): the three components — controller, speaker and
// proxy — never import one another; config and the internal helpers
// import no component and nothing of the command line; only the command
// line (cmd/herald and cmd/herald/cli) puts components together.
package layering
