package lbapi

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// AnnotationDrain on a Node asks its speaker to hand the node's
// addresses over (layer 2) and to move its routes away (BGP) before the
// node is taken down; `herald drain NODE` sets it to DrainValue and
// `herald drain --undo NODE` removes it. An annotation, not a label:
// it is an instruction to herald, not something to select Nodes by, and
// a label would change which BGPPeers and advertisements whose
// nodeSelectors match the node while it is drained.
const AnnotationDrain = "herald.io/drain"

// DrainValue is the one value that drains a node. "false" is read as
// not drained, so a hand edit that means "no" does what it says.
const DrainValue = "true"

// NodeDrain reads the drain mark of a Node: set is false when the Node
// carries no AnnotationDrain. A value other than "true" or "false" is an
// error naming the node and the annotation; the caller then keeps the
// state it had, so a typo neither drains a node nor undrains it.
func NodeDrain(n *corev1.Node) (drained, set bool, err error) {
	v, ok := n.Annotations[AnnotationDrain]
	if !ok {
		return false, false, nil
	}
	return ParseDrain(n.Name, v)
}

// ParseDrain reads node's AnnotationDrain value v (see NodeDrain).
func ParseDrain(node, v string) (drained, set bool, err error) {
	switch v {
	case DrainValue:
		return true, true, nil
	case "false":
		return false, true, nil
	}
	return false, true, fmt.Errorf("node %s: annotation %s=%q: want %q (herald drain %s) or no annotation (herald drain --undo %s)",
		node, AnnotationDrain, v, DrainValue, node, node)
}
