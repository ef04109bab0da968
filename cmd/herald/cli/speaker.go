package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/herald-lb/herald/internal/daemon"
	"github.com/herald-lb/herald/internal/flagusage"
	"github.com/herald-lb/herald/proxy"
	"github.com/herald-lb/herald/speaker"
)

// speakerCmd is `herald speaker`: the speaker and, unless --proxy=false,
// the service proxy in the same process. This is where the two meet; the
// speaker package knows nothing of the proxy but a readiness check.
type speakerCmd struct {
	speaker speaker.Options
	proxy   proxy.Options
}

func newSpeakerCmd() *speakerCmd {
	return &speakerCmd{speaker: speaker.DefaultOptions(), proxy: proxy.DefaultOptions()}
}

// flags defines the speaker's flags and the proxy's on one flag set.
// finish, once it is parsed, checks both and gives the proxy the
// speaker's node, kubeconfig and API limits.
func (c *speakerCmd) flags(fs *pflag.FlagSet) (finish func() error) {
	finishSpeaker := speaker.Flags(fs, &c.speaker)
	finishProxy := proxy.BindFlags(fs, &c.proxy)
	return func() error {
		if err := errors.Join(finishSpeaker(), finishProxy()); err != nil {
			return err
		}
		p := &c.proxy
		p.Kubeconfig, p.NodeName, p.QPS, p.Burst = c.speaker.Kubeconfig, c.speaker.NodeName, c.speaker.QPS, c.speaker.Burst
		if !c.speaker.Proxy {
			return nil // its flags are not checked when it does not run
		}
		var errs []error
		if err := p.Validate(); err != nil {
			errs = append(errs, err)
		}
		if a := c.speaker.MetricsAddr; a == p.MetricsBindAddress || a == p.HealthzBindAddress {
			errs = append(errs, fmt.Errorf("--metrics-addr: %s is also the proxy's --metrics-bind-address or --healthz-bind-address", a))
		}
		return errors.Join(errs...)
	}
}

// parseSpeaker reads the speaker's flags and the proxy's in one command
// line.
func parseSpeaker(args []string, out io.Writer) (speakerCmd, error) {
	c := newSpeakerCmd()
	err := flagusage.ParseFlags("speaker", args, out, c.flags)
	return *c, err
}

// runSpeaker runs the proxy (restarted after a failure) next to the
// speaker, whose readiness includes the proxy's health.
func runSpeaker(ctx context.Context, c speakerCmd, reread func() (proxy.Options, error), log *slog.Logger) error {
	if !c.speaker.Proxy {
		return speaker.Run(ctx, c.speaker, log)
	}
	plog := log.With("component", "proxy")
	p := c.withProxy()
	// A change of --config restarts the proxy, never the speaker: the
	// addresses stay where they are.
	p.SetReread(reread)
	g := guardUninstall(ctx, c.proxy, plog)
	pctx, stopProxy := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); keepRunning(pctx, p, plog) }()
	err := speaker.Run(ctx, c.speaker, log)
	stopProxy() // a speaker that failed on its own takes the proxy along
	<-done
	if ctx.Err() != nil {
		// After the speaker's shutdown: its last API calls may still go
		// through these rules (the kubernetes Service's ClusterIP).
		g.finish(p)
	}
	return err
}

// withProxy makes the in-process proxy and ties it to the speaker: the
// speaker's readiness includes the proxy's health, its addresses wait for
// the proxy's rules, and its --metrics-addr serves the proxy's metrics
// too (the proxy's --metrics-bind-address, the loopback by default, keeps
// serving them for kube-proxy's tools).
func (c *speakerCmd) withProxy() *proxy.Proxy {
	p := proxy.New(c.proxy)
	c.speaker.Ready = p.Healthy
	c.speaker.ProxyRules = p
	c.speaker.ProxyMetrics = p.Metrics().Registry
	return p
}

// keepRunning runs the proxy, starting it again after a failure (another
// proxy holding its ports, an API outage at start) with a growing pause,
// without disturbing the announcements.
func keepRunning(ctx context.Context, p *proxy.Proxy, log *slog.Logger) {
	_ = daemon.Retry(ctx, 5*time.Second, time.Minute, func(next time.Duration) bool {
		err := p.Run(ctx, log)
		if ctx.Err() != nil {
			return true
		}
		log.Error("the in-process proxy stopped; restarting it", "err", err, "in", next)
		return false
	})
}
