package proxy

// Network programming latency, as kube-proxy measures it
// (kubeproxy_network_programming_duration_seconds): from an endpoint
// change's trigger time (Trigger) to the moment a sync applied the rules
// of the slice's family, once per change and family, in full and partial
// syncs alike.

// awaitTriggers keeps the snapshot's trigger times of f's family until
// a sync of f succeeds. Those of a family this node does not program are
// dropped, as a single-stack kube-proxy never reads such slices.
func (f *famState) awaitTriggers(snap Snapshot) {
	for _, tr := range snap.Triggers {
		if tr.Family == f.Family {
			f.triggers = append(f.triggers, tr)
		}
	}
}

// observeProgrammed records the latency of every change f's sync just
// applied. Unlike kube-proxy, which loses them when a sync fails, a
// failed sync keeps them for the next one: the change reaches the rules
// only then, and that is the time the SLI is about.
func (s *Syncer) observeProgrammed(f *famState) {
	if len(f.triggers) == 0 {
		return
	}
	now := s.now()
	for _, tr := range f.triggers {
		d := now.Sub(tr.At)
		s.metrics.networkProgramming.Observe(d.Seconds())
		s.log.Debug("network programmed", "service", tr.Service.Namespace+"/"+tr.Service.Name, "family", f.Family, "elapsed", d)
	}
	f.triggers = nil
}
