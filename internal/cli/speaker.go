package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/herald-lb/herald/internal/daemon"
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

// parseSpeaker reads the speaker's flags and the proxy's in one command
// line. The proxy shares the speaker's node, kubeconfig and API limits.
func parseSpeaker(args []string, out io.Writer) (speakerCmd, error) {
	c := speakerCmd{proxy: proxy.DefaultOptions()}
	var err error
	c.speaker, err = speaker.ParseFlagsWith(args, out, func(fs *flag.FlagSet) func() error {
		return proxy.BindFlags(fs, &c.proxy)
	})
	if err != nil {
		return c, err
	}
	p := &c.proxy
	p.Kubeconfig, p.NodeName, p.QPS, p.Burst = c.speaker.Kubeconfig, c.speaker.NodeName, c.speaker.QPS, c.speaker.Burst
	if !c.speaker.Proxy {
		return c, nil // its flags are not checked when it does not run
	}
	var errs []error
	if err := p.Validate(); err != nil {
		errs = append(errs, err)
	}
	if a := c.speaker.MetricsAddr; a == p.MetricsBindAddress || a == p.HealthzBindAddress {
		errs = append(errs, fmt.Errorf("--metrics-addr: %s is also the proxy's --metrics-bind-address or --healthz-bind-address", a))
	}
	return c, errors.Join(errs...)
}

// runSpeaker runs the proxy (restarted after a failure) next to the
// speaker, whose readiness includes the proxy's health.
func runSpeaker(ctx context.Context, c speakerCmd, log *slog.Logger) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	if c.speaker.Proxy {
		p := proxy.New(c.proxy)
		c.speaker.Ready = p.Healthy
		wg.Add(1)
		go func() { defer wg.Done(); keepRunning(ctx, p, log.With("component", "proxy")) }()
	}
	return speaker.Run(ctx, c.speaker, log)
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
