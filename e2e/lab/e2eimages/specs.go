package e2eimages

import (
	"fmt"
	"strings"
	"time"

	"github.com/herald-lb/herald/e2e/lab/k8sbin"

	imageutils "k8s.io/kubernetes/test/utils/image"
)

// DebianBase is the image the stand-ins start from: Debian bookworm-slim,
// which hack/image.sh makes locally from Debian packages (label
// io.herald.base=local) where no registry provides it.
const DebianBase = "docker.io/library/debian:bookworm-slim"

// The images, by the names Options.Only and Result use.
const (
	Agnhost              = "agnhost"
	Pause                = "pause"
	BusyBox              = "busybox"
	Nginx                = "nginx"
	RegressionIssue74839 = "regression-issue-74839"
	DistrolessIptables   = "distroless-iptables"
	JessieDnsutils       = "jessie-dnsutils"
	// EchoServer is the image of the tutorial "Using Source IP", which
	// real lab nodes run (the lab kubelet runs the program directly).
	EchoServer = "echoserver"
	// KubeProxy is kube-proxy of the pinned release, for real nodes' labs
	// with kube-proxy as the service proxy.
	KubeProxy = "kube-proxy"
)

// EchoServerRef is the tutorial's echoserver image.
const EchoServerRef = "registry.k8s.io/echoserver:1.4"

// LabRefs are the images real lab nodes need beyond the framework's: the
// framework's pause (their sandbox), busybox and agnhost, the tutorial's
// echoserver, and with kubeProxyVersion set kube-proxy of that release.
func LabRefs(kubeProxyVersion string) Refs {
	f := FrameworkRefs()
	r := Refs{Pause: f[Pause], BusyBox: f[BusyBox], Agnhost: f[Agnhost], EchoServer: EchoServerRef}
	if kubeProxyVersion != "" {
		r[KubeProxy] = "registry.k8s.io/kube-proxy:" + kubeProxyVersion
	}
	return r
}

// Refs maps an image's name to the reference the e2e framework puts in
// its pod specs.
type Refs map[string]string

// FrameworkRefs are the references of the pinned framework, from
// k8s.io/kubernetes/test/utils/image: exactly what the tests ask the
// kubelet for. (That package reads KUBE_TEST_REPO_LIST as the tests do,
// so a registry mapping given there applies here too.)
func FrameworkRefs() Refs {
	return Refs{
		Agnhost:              imageutils.GetE2EImage(imageutils.Agnhost),
		Pause:                imageutils.GetPauseImageName(),
		BusyBox:              imageutils.GetE2EImage(imageutils.BusyBox),
		Nginx:                imageutils.GetE2EImage(imageutils.Nginx),
		RegressionIssue74839: imageutils.GetE2EImage(imageutils.RegressionIssue74839),
		DistrolessIptables:   imageutils.GetE2EImage(imageutils.DistrolessIptables),
		JessieDnsutils:       imageutils.GetE2EImage(imageutils.JessieDnsutils),
	}
}

// LeftOut is an image of the framework's that is not built, and why.
type LeftOut struct {
	Ref string
	Why string
}

// LeftOutImages are the framework's images that the sig-network tests
// (test/e2e/network and the framework parts they use) or the framework's
// helpers name, but that no stand-in is built for.
func LeftOutImages() []LeftOut {
	return []LeftOut{
		{imageutils.GetE2EImage(imageutils.Httpd),
			"only the framework's StatefulSet fixtures use it, no sig-network test"},
		{imageutils.GetE2EImage(imageutils.ResourceConsumer),
			"only the framework's autoscaling helpers use it, no sig-network test"},
		{imageutils.GetE2EImage(imageutils.AppArmorLoader),
			"only the framework's AppArmor helpers use it; the lab kubelet does no AppArmor"},
		{imageutils.GetE2EImage(imageutils.VolumeNFSServer),
			"only the framework's volume helpers use it, no sig-network test"},
	}
}

// Spec is one image to build: its Containerfile and what goes into its
// build context.
type Spec struct {
	Name string
	Ref  string
	// Upstream says what upstream's image is made of.
	Upstream      string
	Containerfile string
	// Binaries are built from the e2e module into the build context.
	Binaries []Binary
	// Programs are binaries made elsewhere (Runner.Program).
	Programs []Program
	// Files are copied from the pinned k8s.io/kubernetes module.
	Files []File
	// Bases are the images it starts FROM (other than scratch).
	Bases []string
	// Missing says what upstream's image has that this one lacks, and
	// why; Differs what this one has that upstream's has not.
	Missing, Differs []string
	// UsedBy names the upstream tests that run it.
	UsedBy []string
}

// Binary is a program built with `go build` (CGO_ENABLED=0, -trimpath)
// from the e2e module, as File in the build context.
type Binary struct {
	File    string
	Package string
	LDFlags string
}

// CoreDNS names the program Runner.Program makes of CoreDNS: the version
// kubeadm installs with the pinned release, built from CoreDNS's Go
// module as the lab's cluster DNS is (package lab/clusterdns).
const CoreDNS = "coredns"

// Program is a binary made by Runner.Program (by Name), as File in the
// build context.
type Program struct {
	File string
	Name string
}

// File is a file of the pinned k8s.io/kubernetes module (Path, relative
// to its directory) copied as Name into the build context.
type File struct {
	Name string
	Path string
}

// tag is the tag of a reference ("" if it has none).
func tag(ref string) string {
	i := strings.LastIndexByte(ref, ':')
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ""
	}
	return ref[i+1:]
}

// header is the comment at the top of each Containerfile.
func header(ref, upstream string) string {
	return fmt.Sprintf("# %s, a local stand-in made by herald's e2e/lab/e2eimages\n# (make e2e-images). Upstream: %s\n", ref, upstream)
}

// aptInstall is a RUN step installing Debian packages without
// recommends and dropping apt's lists.
func aptInstall(pkgs ...string) string {
	return "RUN apt-get update \\\n" +
		" && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends " + strings.Join(pkgs, " ") + " \\\n" +
		" && rm -rf /var/lib/apt/lists/*"
}

// makers renders each image's Spec for its reference, in build order.
var makers = []struct {
	name string
	spec func(ref string) Spec
}{
	{Agnhost, agnhostSpec},
	{Pause, pauseSpec},
	{BusyBox, busyboxSpec},
	{Nginx, nginxSpec},
	{RegressionIssue74839, regressionSpec},
	{DistrolessIptables, iptablesSpec},
	{JessieDnsutils, dnsutilsSpec},
	{EchoServer, echoserverSpec},
	{KubeProxy, kubeProxySpec},
}

// Specs are the images to build for refs (FrameworkRefs in use); a name
// refs lacks is left out.
func Specs(refs Refs) []Spec {
	var out []Spec
	for _, m := range makers {
		if ref := refs[m.name]; ref != "" {
			out = append(out, m.spec(ref))
		}
	}
	return out
}

func agnhostSpec(ref string) Spec {
	const upstream = "test/images/agnhost/Dockerfile of the pinned k8s.io/kubernetes: Alpine with bind-tools, curl, netcat-openbsd, iproute2, iperf and bash, CoreDNS 1.6.2 in /coredns, /agnhost"
	cf := header(ref, upstream) + `FROM ` + DebianBase + `

# Upstream's apk packages by their Debian names: bind-tools (dig, nslookup)
# is bind9-dnsutils; curl (with the CA bundle Alpine's brings), netcat-openbsd
# (nc), iproute2 (ip, ss), iperf (iperf 2) and bash keep their names. wget
# and procps stand in for busybox's wget and ps, which Alpine's /bin/sh
# brings along and the tests call (the Service tests' exec pods run
# "wget -q -O - -T 1").
` + aptInstall("bind9-dnsutils", "curl", "ca-certificates", "netcat-openbsd", "iproute2", "iperf", "bash", "wget", "procps") + ` \
 && ln -s /usr/bin/iperf /usr/local/bin/iperf

# 80: test-webserver; 8080: netexec, nettest, resource-consumer; 8081:
# netexec (UDP); 9376: serve-hostname; 5000: grpc-health-checking.
EXPOSE 80 8080 8081 9376 5000

# netexec's uploads; porter's default certificate and key.
RUN mkdir /uploads
COPY localhost.crt localhost.key /

COPY agnhost /agnhost
# The DNS tests run /coredns as a DNS server of their own. Upstream's is
# the coredns 1.6.2 release download; this is the CoreDNS the lab's
# cluster DNS runs (kubeadm's version, from CoreDNS's Go module).
COPY coredns /coredns
# The entrypoint-tester tests run the image with agnhost-2 as entrypoint.
RUN ln -s agnhost /agnhost-2

# user-defined-in-image (uid 1000, own group 1000) is also in
# group-defined-in-image (gid 50000), for the SupplementalGroups tests.
RUN groupadd -g 50000 group-defined-in-image \
 && useradd -u 1000 -U -m -s /bin/sh user-defined-in-image \
 && usermod -a -G group-defined-in-image user-defined-in-image

ENTRYPOINT ["/agnhost"]
CMD ["pause"]
`
	return Spec{
		Name:          Agnhost,
		Ref:           ref,
		Upstream:      upstream,
		Containerfile: cf,
		Binaries: []Binary{{File: "agnhost", Package: "k8s.io/kubernetes/test/images/agnhost",
			// As upstream's image-util.sh and agnhost Makefile build it.
			LDFlags: "-w -X main.Version=" + tag(ref)}},
		Programs: []Program{{File: "coredns", Name: CoreDNS}},
		Files: []File{
			{Name: "localhost.crt", Path: "test/images/agnhost/porter/localhost.crt"},
			{Name: "localhost.key", Path: "test/images/agnhost/porter/localhost.key"},
		},
		Bases: []string{DebianBase},
		Missing: []string{
			"busybox's other applets (upstream's /bin/sh is busybox); Debian's coreutils, wget and procps give the ones the tests call",
		},
		Differs: []string{
			"Debian bookworm-slim instead of Alpine: /bin/sh is dash, tools are Debian's builds (GNU wget, glibc)",
			"/coredns is the CoreDNS kubeadm installs with the pinned release (built from its Go module, as the lab's cluster DNS), not the 1.6.2 release upstream downloads",
		},
		UsedBy: []string{"most sig-network tests: netexec, serve-hostname, connect, porter, pause, and exec pods running nc, curl, wget"},
	}
}

func pauseSpec(ref string) Spec {
	const upstream = "build/pause: FROM scratch, a static /pause (pause.c), USER 65535:65535, ENTRYPOINT [\"/pause\"]"
	cf := header(ref, upstream) + `FROM scratch
# e2e/cmd/pause: waits for SIGINT or SIGTERM, exits 0, reaps orphans as PID 1.
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
`
	return Spec{
		Name:          Pause,
		Ref:           ref,
		Upstream:      upstream,
		Containerfile: cf,
		Binaries:      []Binary{{File: "pause", Package: "github.com/herald-lb/herald/e2e/cmd/pause", LDFlags: "-s -w"}},
		Differs:       []string{"/pause is a Go program of ours (e2e/cmd/pause) rather than pause.c; it behaves the same: signals, reaping, -v"},
		UsedBy:        []string{"Service latency ([sig-network] Service endpoints latency) and the framework's pause pods"},
	}
}

func echoserverSpec(ref string) Spec {
	const upstream = "echoserver 1.4 (kubernetes/contrib's ingress echoheaders): nginx with a Lua handler answering CLIENT VALUES (client_address=...), SERVER VALUES and HEADERS RECEIVED on :8080"
	cf := header(ref, upstream) + `FROM scratch
# e2e/cmd/echoserver: the same answer on :8080, hostname from the pod.
COPY echoserver /echoserver
EXPOSE 8080
ENTRYPOINT ["/echoserver"]
`
	return Spec{
		Name:          EchoServer,
		Ref:           ref,
		Upstream:      upstream,
		Containerfile: cf,
		Binaries:      []Binary{{File: "echoserver", Package: "github.com/herald-lb/herald/e2e/cmd/echoserver", LDFlags: "-s -w"}},
		Differs:       []string{"a Go program of ours (e2e/cmd/echoserver) instead of nginx with Lua; its answer has the fields the tutorial reads"},
		UsedBy:        []string{"the tutorial \"Using Source IP\" on real lab nodes (herald-lab walkthrough)"},
	}
}

func kubeProxySpec(ref string) Spec {
	const upstream = "registry.k8s.io/kube-proxy: distroless-iptables (iptables, nftables, conntrack, ipset on a distroless Debian) with /usr/local/bin/kube-proxy"
	cf := header(ref, upstream) + `FROM ` + DebianBase + `
` + aptInstall("iptables", "nftables", "conntrack", "ipset", "kmod") + `
COPY kube-proxy /usr/local/bin/kube-proxy
ENTRYPOINT ["/usr/local/bin/kube-proxy"]
`
	return Spec{
		Name:          KubeProxy,
		Ref:           ref,
		Upstream:      upstream,
		Containerfile: cf,
		// Stamped with the release like upstream's build (k8sbin.LDFlags),
		// dated at the epoch so the image stays the same build to build.
		Binaries: []Binary{{File: "kube-proxy", Package: "k8s.io/kubernetes/cmd/kube-proxy", LDFlags: k8sbin.LDFlags(tag(ref), time.Unix(0, 0))}},
		Bases:    []string{DebianBase},
		Differs:  []string{"not distroless: a whole bookworm-slim userland around the same netfilter tools"},
		UsedBy:   []string{"real lab nodes with kube-proxy as the service proxy (the conformance run's baseline, TestProxy's comparisons)"},
	}
}

func busyboxSpec(ref string) Spec {
	const upstream = "test/images/busybox: FROM busybox:1.37.0 (busybox's applets linked in /bin, CMD [\"sh\"])"
	cf := header(ref, upstream) + `FROM ` + DebianBase + ` AS debian
` + aptInstall("busybox-static") + `
# The root file system of the official busybox image: the static busybox,
# root's and nobody's entries, the usual directories.
RUN mkdir -p /out/bin /out/etc /out/root /out/home /out/tmp /out/var/spool/mail /out/var/www /out/usr/sbin \
 && chmod 1777 /out/tmp && chmod 700 /out/root \
 && cp /bin/busybox /out/bin/busybox \
 && printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' >/out/etc/passwd \
 && printf 'root:x:0:\nnobody:x:65534:\n' >/out/etc/group

FROM scratch
COPY --from=debian /out/ /
RUN ["/bin/busybox", "--install", "-s", "/bin"]
CMD ["sh"]
`
	return Spec{
		Name:          BusyBox,
		Ref:           ref,
		Upstream:      upstream,
		Containerfile: cf,
		Bases:         []string{DebianBase},
		Differs: []string{
			"Debian's busybox-static (BusyBox 1.35 with Debian's applet selection) instead of BusyBox 1.37; applets are symbolic links to /bin/busybox",
			"its nc applet is the small one (TCP, -l, -p, -w, -e; no -u or -v): enough for the Conntrack test's 'nc boom-server 9000'",
			"its wget has no -T (and crashes with SIGSEGV when given it): no test in scope runs wget in this image (the Service tests' 'wget -T' runs in agnhost exec pods, which have GNU wget)",
		},
		UsedBy: []string{
			"[sig-network] Conntrack: the init container of 'should be able to preserve UDP traffic when initial unready endpoints get ready' and the client of 'proxy implementation should not be vulnerable to the invalid conntrack state bug'",
		},
	}
}

func nginxSpec(ref string) Spec {
	const upstream = "test/images/nginx: FROM nginx:*-alpine (nginx in the foreground on :80, logs to stdout/stderr)"
	cf := header(ref, upstream) + `FROM ` + DebianBase + `
# Debian's nginx, its default site on :80, logging to the container's
# output as the official image does.
` + aptInstall("nginx") + ` \
 && ln -sf /dev/stdout /var/log/nginx/access.log \
 && ln -sf /dev/stderr /var/log/nginx/error.log
EXPOSE 80
STOPSIGNAL SIGQUIT
CMD ["nginx", "-g", "daemon off;"]
`
	return Spec{
		Name:          Nginx,
		Ref:           ref,
		Upstream:      upstream,
		Containerfile: cf,
		Bases:         []string{DebianBase},
		Differs:       []string{"Debian's nginx 1.22 on bookworm-slim instead of the official nginx image on Alpine; same default site on :80"},
		UsedBy:        []string{"[sig-network] EndpointSlice should create Endpoints and EndpointSlices for Pods matching a Service [Conformance]"},
	}
}

func regressionSpec(ref string) Spec {
	const upstream = "test/images/regression-issue-74839: /regression-issue-74839 on debian-base bookworm, ENTRYPOINT [\"/regression-issue-74839\"]"
	cf := header(ref, upstream) + `FROM ` + DebianBase + `
COPY regression-issue-74839 /regression-issue-74839
ENTRYPOINT ["/regression-issue-74839"]
`
	return Spec{
		Name:          RegressionIssue74839,
		Ref:           ref,
		Upstream:      upstream,
		Containerfile: cf,
		Binaries: []Binary{{File: "regression-issue-74839", Package: "k8s.io/kubernetes/test/images/regression-issue-74839",
			LDFlags: "-w"}},
		Bases:   []string{DebianBase},
		Differs: []string{"bookworm-slim instead of Kubernetes' debian-base bookworm (both minimal Debian 12)"},
		UsedBy:  []string{"[sig-network] Conntrack proxy implementation should not be vulnerable to the invalid conntrack state bug [Privileged] (the boom-server)"},
	}
}

func iptablesSpec(ref string) Spec {
	const upstream = "kubernetes/release images/build/distroless-iptables: a distroless Debian with iptables, conntrack, ipset and their libraries (kube-proxy's base)"
	cf := header(ref, upstream) + `FROM ` + DebianBase + `
# The tools of kube-proxy's base image from Debian's packages. The test
# that uses it (KubeProxy should set TCP CLOSE_WAIT timeout) runs sleep,
# sh -c, which, cat, grep and conntrack in it: the slim base has the rest.
` + aptInstall("iptables", "conntrack", "ipset", "kmod") + `
`
	return Spec{
		Name:          DistrolessIptables,
		Ref:           ref,
		Upstream:      upstream,
		Containerfile: cf,
		Bases:         []string{DebianBase},
		Differs:       []string{"not distroless: a whole bookworm-slim userland (shell, coreutils, apt) around the same netfilter tools"},
		UsedBy:        []string{"[sig-network] KubeProxy should set TCP CLOSE_WAIT timeout [Privileged] (the host-network exec pod)"},
	}
}

func dnsutilsSpec(ref string) Spec {
	const upstream = "test/images/jessie-dnsutils: Debian jessie with dnsutils, and CoreDNS 1.5.0 in /coredns"
	cf := header(ref, upstream) + `FROM ` + DebianBase + `
# dnsutils (dig, nslookup, host) is bind9-dnsutils in bookworm. The DNS
# tests' prober runs sh, dig, getent, test, sleep: the slim base has the
# rest. Not here: /coredns (a release download upstream; no test runs it
# from this image, and Debian has no CoreDNS package).
` + aptInstall("bind9-dnsutils") + `
`
	return Spec{
		Name:          JessieDnsutils,
		Ref:           ref,
		Upstream:      upstream,
		Containerfile: cf,
		Bases:         []string{DebianBase},
		Missing:       []string{"/coredns (CoreDNS 1.5.0, a release download in upstream's Dockerfile): no test runs it from this image"},
		Differs:       []string{"Debian bookworm instead of jessie (bind 9.18's dig instead of 9.9's)"},
		UsedBy:        []string{"[sig-network] DNS tests: the jessie prober pod (dig and getent queries); they need the lab's cluster DNS"},
	}
}
