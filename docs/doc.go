// Package docs holds herald's user documentation (Markdown) and the test
// that keeps its links working: every relative link and #anchor in the
// README and the docs resolves.
package docs
