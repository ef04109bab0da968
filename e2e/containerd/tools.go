//go:build tools

// Package containerd pins the container runtime's programs for the lab's
// real nodes (package e2e/lab/labbin builds them from this module).
package containerd

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
