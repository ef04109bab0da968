package proxy

import (
	"cmp"
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"reflect"
	"time"
)

// configPollPeriod is how often the proxy reads --config's file for a
// change. A ConfigMap volume is updated by swapping a symlink, which a
// watch on the file misses (kube-proxy's fsnotify watch sees only writes
// and renames of the file itself); reading the contents catches every
// kind of update, and the kubelet's own refresh of the volume takes up
// to a minute anyway.
const configPollPeriod = 5 * time.Second

// SetReread gives the proxy a way to read its options again, the command
// line's and --config's, as at start. With it, a change of --config's
// file is taken up while running (Run); without it, the file is read
// once.
func (p *Proxy) SetReread(f func() (Options, error)) { p.reread = f }

// watchConfig reads --config's file every configPollPeriod until ctx
// ends. When its contents change and the options read again are valid
// and differ from the running ones, it leaves them in p.next and calls
// restart. A file that cannot be read or used is logged, once per
// content, and the running configuration stays: a bad edit never stops
// a proxy that serves traffic.
func (p *Proxy) watchConfig(ctx context.Context, restart func(), log *slog.Logger) {
	if p.reread == nil || p.o.ConfigFile == "" || p.o.Cleanup {
		return
	}
	seen := p.o.configDigest
	readFailing := false
	t := time.NewTicker(cmp.Or(p.configPoll, configPollPeriod))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, err := os.ReadFile(p.o.ConfigFile)
		if err != nil {
			if !readFailing {
				log.Warn("--config: cannot read the file; keeping the running configuration", "config", p.o.ConfigFile, "err", err)
			}
			readFailing = true
			continue
		}
		readFailing = false
		digest := sha256.Sum256(data)
		if digest == seen {
			continue
		}
		seen = digest
		next, err := p.reread()
		switch {
		case err != nil:
			log.Error("--config changed, but the new contents cannot be used; keeping the running configuration", "config", p.o.ConfigFile, "err", err)
		case sameOptions(next, p.o):
			log.Info("--config changed; nothing the proxy uses did", "config", p.o.ConfigFile, "leftOut", next.ConfigWarnings)
		default:
			log.Info("--config changed: restarting the proxy with it (the rules stay in place)", "config", p.o.ConfigFile)
			p.next.Store(&next)
			restart()
			return
		}
	}
}

// sameOptions tells whether two readings of the options run the proxy
// alike: what only describes where values came from is left out.
func sameOptions(a, b Options) bool {
	for _, o := range []*Options{&a, &b} {
		o.ConfigWarnings, o.ConfigNotes, o.fromFile, o.configDigest = nil, nil, nil, [sha256.Size]byte{}
	}
	return reflect.DeepEqual(a, b)
}
