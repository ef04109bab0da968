// Package config is herald's one configuration parser. It turns the herald.io
// custom resources (and the Secrets they reference) into a validated model
// with no Kubernetes types inside, plus a list of problems that each name the
// object and field at fault.
//
// The controller, the speaker and `herald validate` all use Parse; none of
// them checks configuration on its own. A bad new object is left out of the
// model and every good object stays in; an edit that makes a working object
// invalid is refused and the object's last valid version (status.inForce,
// kept by the controller) stays in force, so one mistake never takes down
// addresses or sessions that are already working.
package config
