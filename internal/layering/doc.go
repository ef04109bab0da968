// Package layering holds the tests that keep herald's packages in layers
// (docs/architecture.md): the three components — controller, speaker and
// proxy — never import one another; config and the internal helpers
// import no component and nothing of the command line; only the command
// line (cmd/herald and cmd/herald/cli) puts components together; and the
// packages that decide (the allocator, the plans, the election, partition
// safety) depend on nothing that acts on the API, the network or the
// kernel.
package layering
