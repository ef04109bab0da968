package cluster

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/herald-lb/herald/e2e/lab/clusterdns"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

// ensureDNSImage builds CoreDNS of the version kubeadm installs with the
// pinned release (cached under e2e/_cache) and stores its image.
func ensureDNSImage(ctx context.Context, moduleDir string, logf func(string, ...any)) (string, error) {
	version, err := clusterdns.KubeadmVersion(ctx, moduleDir)
	if err != nil {
		return "", err
	}
	bin, err := clusterdns.EnsureBinary(ctx, filepath.Join(moduleDir, "_cache"), version, logf)
	if err != nil {
		return "", err
	}
	image := clusterdns.Image(version)
	if err := clusterdns.EnsureImage(ctx, bin, image, logf); err != nil {
		return "", err
	}
	return image, nil
}

// installDNS applies the cluster DNS and waits until it answers: its
// pods ready, and the kube-dns Service with endpoints.
func (l *Lab) installDNS(ctx context.Context) error {
	u, err := url.Parse(l.APIServerURL)
	if err != nil {
		return err
	}
	m := clusterdns.Manifests(clusterdns.Config{
		Image:         l.dnsImage,
		ServiceIP:     clusterdns.ServiceIP(topology.ServiceCIDR),
		APIServerHost: u.Hostname(),
		APIServerPort: u.Port(),
	})
	k := l.kubectlClient()
	if _, err := k.RunStdin(ctx, strings.NewReader(m), "apply", "-f", "-"); err != nil {
		return err
	}
	start := time.Now()
	if _, err := k.Run(ctx, "-n", "kube-system", "rollout", "status", "--timeout=120s", "deployment/coredns"); err != nil {
		return fmt.Errorf("the cluster DNS did not become ready: %w", err)
	}
	l.logf("cluster DNS (%s) ready at %s in %s", l.dnsImage, clusterdns.ServiceIP(topology.ServiceCIDR), since(start))
	return nil
}
