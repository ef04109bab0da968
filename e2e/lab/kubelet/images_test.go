package kubelet

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestImageKind(t *testing.T) {
	for image, want := range map[string]ImageKind{
		"ghcr.io/herald-lb/herald:dev":            HeraldImage,
		"ghcr.io/herald-lb/herald:v0.2.0":         HeraldImage,
		"ghcr.io/herald-lb/herald@sha256:0123abc": HeraldImage,
		"herald:dev":                          HeraldImage,
		"registry.k8s.io/echoserver:1.4":      EchoServerImage,
		"ghcr.io/herald-lb/herald":            "",
		"ghcr.io/herald-lb/herald:":           "",
		"ghcr.io/herald-lb/heraldx:dev":       "",
		"ghcr.io/herald-lb/herald/other:dev":  "",
		"herald:v2":                           "",
		"registry.k8s.io/kube-proxy:v1.34.10": KubeProxyImage,
		"registry.k8s.io/kube-proxy:v1.33.0":  KubeProxyImage,
		"registry.k8s.io/kube-proxy":          "",
		"registry.k8s.io/kube-proxy-amd64:v1": "",
		"k8s.gcr.io/kube-proxy:v1.34.10":      "",
	} {
		got, ok := imageKind(image)
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", image, got, ok, want)
		}
	}
}

func TestKubeProxyCommand(t *testing.T) {
	p := Programs{KubeProxy: "/cache/bin/kube-proxy", KubeProxyVersion: "v1.34.10"}
	env := map[string]string{"NODE_NAME": "node2"}
	image := KubeProxyImageName("v1.34.10")
	if image != "registry.k8s.io/kube-proxy:v1.34.10" {
		t.Errorf("KubeProxyImageName: %s", image)
	}
	prog, args, err := p.command(&v1.Container{Image: image,
		Command: []string{"/usr/local/bin/kube-proxy", "--hostname-override=$(NODE_NAME)"}, Args: []string{"--v=2"}}, env)
	if err != nil || prog != "/cache/bin/kube-proxy" || strings.Join(args, " ") != "--hostname-override=node2 --v=2" {
		t.Errorf("kube-proxy: %q %q %v", prog, args, err)
	}
	for _, c := range []struct {
		c      v1.Container
		p      Programs
		reason string
		has    string
	}{
		{v1.Container{Image: image, Args: []string{"--v=2"}}, p, ReasonCreateContainerError, "/usr/local/bin/kube-proxy"},
		{v1.Container{Image: image, Command: []string{"sh", "-c", "kube-proxy"}}, p, ReasonCreateContainerError, `"sh"`},
		{v1.Container{Image: "registry.k8s.io/kube-proxy:v1.33.0", Command: []string{"kube-proxy"}}, p, ReasonErrImagePull, "runs only registry.k8s.io/kube-proxy:v1.34.10"},
		{v1.Container{Image: image, Command: []string{"kube-proxy"}}, Programs{}, ReasonCreateContainerError, "--kube-proxy"},
	} {
		_, _, err := c.p.command(&c.c, env)
		ce, ok := err.(*containerError)
		if !ok || ce.Reason != c.reason || !strings.Contains(ce.Message, c.has) {
			t.Errorf("%s %q: %v, want %s with %q", c.c.Image, c.c.Command, err, c.reason, c.has)
		}
	}
	// Without a version (a kubelet started alone), every tag runs.
	if _, _, err := (Programs{KubeProxy: "/kp"}).command(&v1.Container{Image: "registry.k8s.io/kube-proxy:v1.33.0", Command: []string{"kube-proxy"}}, env); err != nil {
		t.Errorf("no version: %v", err)
	}
}

func TestUsesImage(t *testing.T) {
	for _, mode := range []bool{false, true} {
		k := &Kubelet{cfg: Config{ImageMode: mode}}
		for image, want := range map[string]bool{
			HeraldImageName:                   mode,
			"ghcr.io/herald-lb/herald:v0.2.0": mode,
			"registry.k8s.io/echoserver:1.4":  false,
			KubeProxyImageName("v1.34.10"):    false,
		} {
			if got := k.usesImage(image); got != want {
				t.Errorf("image mode %v: usesImage(%s) = %v, want %v", mode, image, got, want)
			}
		}
	}
}

func TestKubeProxyVersionDefault(t *testing.T) {
	c := Config{
		NodeName: "node1", NodeNetns: "n1", NetnsPrefix: "x", Kubeconfig: "k", StateDir: "s", KubeletVersion: "v1.34.10",
		NodeIP:     netip.MustParseAddr("198.51.100.11"),
		PodCIDR:    netip.MustParsePrefix("198.18.1.0/24"),
		PodGateway: netip.MustParseAddr("198.18.1.1"),
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.Programs.KubeProxyVersion != "v1.34.10" {
		t.Errorf("kube-proxy's version defaults to %q, want the kubelet's", c.Programs.KubeProxyVersion)
	}
	if !slices.Contains(c.Args(), "--kube-proxy=") {
		t.Errorf("Args has no --kube-proxy: %q", c.Args())
	}
}
