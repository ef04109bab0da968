package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/herald-lb/herald/internal/daemon"
	"github.com/herald-lb/herald/proxy"
	"github.com/herald-lb/herald/speaker/handover"
)

// Bounds of the work at SIGTERM; with the speaker's own shutdown (at
// most 4 s, in parallel with the decision) they fit the node agents'
// terminationGracePeriodSeconds of 30. Removing the rules of both
// families took 3.4 s on a busy real node (iptables-nft, kubelet's and
// the CNI plugins' rules beside herald's), and more than 8.8 s on one
// with a load of 10 on 2 cores: 6 s was too little. Only an uninstall
// waits for it; a restart keeps the rules and exits at once.
const (
	decideTimeout = 2 * time.Second
	removeTimeout = 20 * time.Second
)

// uninstallGuard decides, once ctx ends, whether herald is being
// uninstalled, and then removes the proxy's rules or keeps them.
type uninstallGuard struct {
	decision chan proxy.Decision
	log      *slog.Logger
}

// guardUninstall starts following the proxy's pod's DaemonSet; the
// decision is made as soon as ctx ends, while the rest shuts down.
func guardUninstall(ctx context.Context, o proxy.Options, log *slog.Logger) *uninstallGuard {
	var api proxy.OwnerAPI
	if o.PodNamespace != "" && o.PodName != "" {
		cl, err := daemon.Connect(o.Kubeconfig, "proxy", o.QPS, o.Burst)
		if err != nil {
			log.Warn("uninstall check unavailable: the rules will stay when the proxy stops", "err", err)
		} else {
			api = proxy.KubeOwner{Kube: cl.Kube}
		}
	}
	// The watch outlives ctx until the decision is made: the DaemonSet's
	// deletion may still be on its way when SIGTERM arrives.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	check := proxy.WatchOwner(watchCtx, api, o.PodNamespace, o.PodName, log)
	g := &uninstallGuard{decision: make(chan proxy.Decision, 1), log: log}
	go func() {
		<-ctx.Done()
		g.decision <- check.Decide(decideTimeout)
		stopWatch()
	}()
	return g
}

// finish acts on the decision once the proxy has stopped.
func (g *uninstallGuard) finish(p *proxy.Proxy) {
	d := <-g.decision
	if !d.Uninstall {
		g.log.Info("restart: keeping rules", "reason", d.Reason)
		return
	}
	g.log.Info("uninstall: removing herald's rules", "reason", d.Reason)
	ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	if err := p.RemoveRules(ctx, g.log); err != nil {
		g.log.Error("uninstall: removing herald's rules failed", "err", err)
	}
	removeHandover(g.log)
}

// removeHandover removes the speaker's forwarding of moved connections
// (speaker/handover), which a speaker that stops for good removes
// itself; one that crashed and never came back leaves it.
func removeHandover(log *slog.Logger) {
	if err := (handover.Netlink{}).Apply(nil); err != nil {
		log.Info("cleanup: the handover tables not removed", "err", err)
		return
	}
	log.Info("cleanup: the handover tables removed")
}

// runProxy is `herald proxy`: the proxy, and its rules removed at stop
// when herald is being uninstalled. reread reads the options again when
// --config's file changes.
func runProxy(ctx context.Context, o proxy.Options, reread func() (proxy.Options, error), log *slog.Logger) error {
	if o.Cleanup {
		err := proxy.Run(ctx, o, log)
		removeHandover(log)
		return err
	}
	g := guardUninstall(ctx, o, log)
	p := proxy.New(o)
	p.SetReread(reread)
	err := p.Run(ctx, log)
	if ctx.Err() == nil {
		return err // failed on its own: no SIGTERM, no decision
	}
	g.finish(p)
	return err
}
