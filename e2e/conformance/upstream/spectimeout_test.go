//go:build e2eupstream

package upstream

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
)

// specTimeout is the bound on every spec's time (--spec-timeout; 0: none).
//
// Ginkgo v2.21.0, the version k8s.io/kubernetes v1.34.10 pins, has no
// suite-wide per-spec timeout: only the SpecTimeout decorator, which the
// upstream tests set on none of theirs, and the suite's --timeout, which
// ends the whole run. (v2.27 adds AddTreeConstructionNodeArgsTransformer,
// which could add the decorator; moving to it moves x/net, x/sys,
// x/crypto and more under the control plane the lab builds from the same
// module.) So the suite sets the decorator's field itself, on every It
// node of the built tree that has none: ginkgo then ends such a spec at
// the bound as it would with SpecTimeout(d) written in the test — the
// spec "timedout" with "A spec timeout occurred" and a progress report of
// where it was, its cleanup run, the next spec started — even when the
// spec sleeps without looking at its context (ginkgo leaks that
// goroutine and moves on).
var specTimeout = flag.Duration("spec-timeout", 0, "end each spec that runs longer than this as timed out (0: no bound)")

// ginkgoVersion is the ginkgo whose internal layout ginkgoNode mirrors.
const ginkgoVersion = "2.21.0"

// ginkgoSuite is ginkgo's global suite (internal/global.Suite); its first
// field is the spec tree, which points at the container being built while
// a container's body runs.
//
//go:linkname ginkgoSuite github.com/onsi/ginkgo/v2/internal/global.Suite
var ginkgoSuite *struct{ tree *ginkgoTreeNode }

// ginkgoTreeNode mirrors ginkgo v2.21.0's internal.TreeNode.
type ginkgoTreeNode struct {
	Node     ginkgoNode
	Parent   *ginkgoTreeNode
	Children []*ginkgoTreeNode
}

// ginkgoNode mirrors ginkgo v2.21.0's internal.Node, field by field (the
// func types' arguments do not change their layout).
type ginkgoNode struct {
	ID       uint
	NodeType types.NodeType

	Text         string
	Body         func()
	CodeLocation types.CodeLocation
	NestingLevel int
	HasContext   bool

	SynchronizedBeforeSuiteProc1Body              func()
	SynchronizedBeforeSuiteProc1BodyHasContext    bool
	SynchronizedBeforeSuiteAllProcsBody           func()
	SynchronizedBeforeSuiteAllProcsBodyHasContext bool

	SynchronizedAfterSuiteAllProcsBody           func()
	SynchronizedAfterSuiteAllProcsBodyHasContext bool
	SynchronizedAfterSuiteProc1Body              func()
	SynchronizedAfterSuiteProc1BodyHasContext    bool

	ReportEachBody  func()
	ReportSuiteBody func()

	MarkedFocus             bool
	MarkedPending           bool
	MarkedSerial            bool
	MarkedOrdered           bool
	MarkedContinueOnFailure bool
	MarkedOncePerOrdered    bool
	FlakeAttempts           int
	MustPassRepeatedly      int
	Labels                  []string
	PollProgressAfter       time.Duration
	PollProgressInterval    time.Duration
	NodeTimeout             time.Duration
	SpecTimeout             time.Duration
	GracePeriod             time.Duration

	NodeIDWhereCleanupWasGenerated uint
}

const boundText = "herald: bound every spec's time"

// This container is registered after every upstream one (this package's
// variables are initialised after its imports'), so when ginkgo enters
// it the rest of the tree is built and its specs not yet generated.
//
// It also makes every [Disruptive] spec serial. Upstream's Disruptive
// tests (the kube-proxy and API server restarts) delete components that
// every other test needs; upstream's CI runs them in serial jobs of their
// own, but the label alone does not keep ginkgo from running them beside
// others. Marked serial, ginkgo runs them after the parallel ones, alone.
var _ = ginkgo.Describe(boundText, func() {
	n, serial, err := prepareSpecs(*specTimeout)
	if err != nil {
		panic(fmt.Sprintf("herald's changes to ginkgo's spec tree (--spec-timeout, serial [Disruptive] specs): %v", err))
	}
	if *specTimeout > 0 {
		fmt.Printf("herald: every spec is bound to %s (--spec-timeout): %d specs\n", *specTimeout, n)
	}
	fmt.Printf("herald: %d [Disruptive] specs run serially, after the others\n", serial)
})

// prepareSpecs sets d (if not 0) as the SpecTimeout of every It node that
// has none and marks every It node labelled Disruptive (itself or by a
// container) serial, after checking that ginkgo is the version mirrored
// and that the node being built (this container) reads back as ginkgo
// made it. It returns how many nodes it bound and made serial.
func prepareSpecs(d time.Duration) (bound, serial int, err error) {
	bound, serial, err = walkSpecs(d)
	return bound, serial, err
}

func walkSpecs(d time.Duration) (int, int, error) {
	if v := types.VERSION; v != ginkgoVersion {
		return 0, 0, fmt.Errorf("ginkgo is v%s, not v%s whose internals it reaches into: check internal.Node and this mirror (from v2.27, AddTreeConstructionNodeArgsTransformer can add SpecTimeout instead)", v, ginkgoVersion)
	}
	if ginkgoSuite == nil || ginkgoSuite.tree == nil {
		return 0, 0, fmt.Errorf("ginkgo's suite has no tree")
	}
	self := &ginkgoSuite.tree.Node
	if self.NodeType != types.NodeTypeContainer || self.Text != boundText ||
		!strings.HasSuffix(self.CodeLocation.FileName, "spectimeout_test.go") ||
		self.PollProgressAfter != -1 || self.PollProgressInterval != -1 || self.GracePeriod != -1 ||
		self.NodeTimeout != 0 || self.SpecTimeout != 0 {
		return 0, 0, fmt.Errorf("ginkgo's node does not read as expected (%s %q at %s): the mirror of internal.Node is wrong", self.NodeType, self.Text, self.CodeLocation)
	}
	root := ginkgoSuite.tree
	for root.Parent != nil {
		root = root.Parent
	}
	n, serial, its := 0, 0, 0
	var walk func(t *ginkgoTreeNode, disruptive bool)
	walk = func(t *ginkgoTreeNode, disruptive bool) {
		disruptive = disruptive || slices.Contains(t.Node.Labels, "Disruptive")
		if t.Node.NodeType == types.NodeTypeIt {
			its++
			if d > 0 && t.Node.SpecTimeout == 0 {
				t.Node.SpecTimeout = d
				n++
			}
			if disruptive && !t.Node.MarkedSerial {
				t.Node.MarkedSerial = true
				serial++
				// Ginkgo runs an Ordered container's specs together,
				// serial or not by the container: mark it too.
				for a := t.Parent; a != nil; a = a.Parent {
					if a.Node.MarkedOrdered {
						a.Node.MarkedSerial = true
					}
				}
			}
		}
		for _, c := range t.Children {
			walk(c, disruptive)
		}
	}
	walk(root, false)
	if its == 0 {
		return 0, 0, fmt.Errorf("no specs found in ginkgo's tree")
	}
	return n, serial, nil
}

var _ = unsafe.Pointer(nil) // go:linkname needs package unsafe
