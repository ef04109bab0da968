package kubelet

import (
	"fmt"
	"path"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// ImageKind is a program the lab can run for an image.
type ImageKind string

const (
	// EchoServerImage answers HTTP on :8080 like echoserver:1.4 (and UDP
	// on $ECHOSERVER_UDP_PORT when the container sets it).
	EchoServerImage ImageKind = "echoserver"
	// HeraldImage runs the herald binary built from this repository.
	HeraldImage ImageKind = "herald"
	// KubeProxyImage runs kube-proxy from the lab's multi-call
	// Kubernetes binary (the release pinned in e2e/go.mod).
	KubeProxyImage ImageKind = "kube-proxy"
)

// HeraldImageName is the project's own image as manifests name it. Its
// entrypoint is the herald binary (/usr/local/bin/herald in the
// Dockerfile's image), so a container's args are herald's arguments. In
// binary mode a command, if given, must start with herald (/herald,
// /usr/bin/herald, ...) and any such path runs the host's binary; image
// mode runs exactly the path the image has, so only "herald" (found
// through PATH) or /usr/local/bin/herald work in both.
const HeraldImageName = "ghcr.io/herald-lb/herald:dev"

// HeraldRepository is herald's image without tag or digest. In binary
// mode every tag of it is this tree's herald binary (imageKind), so a
// helm upgrade to another tag is a rolling restart there; image mode
// runs the real tags.
const HeraldRepository = "ghcr.io/herald-lb/herald"

// KubeProxyRepository is upstream's kube-proxy image without tag. The
// lab kubelet runs the tag of its own release (Programs.KubeProxyVersion,
// KubeProxyImageName) as Programs.KubeProxy; other tags are ErrImagePull,
// as the lab has no other kube-proxy.
const KubeProxyRepository = "registry.k8s.io/kube-proxy"

// KubeProxyImageName is the kube-proxy image of a Kubernetes release,
// e.g. registry.k8s.io/kube-proxy:v1.34.10.
func KubeProxyImageName(version string) string { return KubeProxyRepository + ":" + version }

// KnownImages maps the image references the lab kubelet runs to programs;
// imageKind adds every tag of HeraldRepository and KubeProxyRepository.
var KnownImages = map[string]ImageKind{
	"registry.k8s.io/echoserver:1.4": EchoServerImage,
	"k8s.gcr.io/echoserver:1.4":      EchoServerImage,
	HeraldImageName:                  HeraldImage,
	"herald:dev":                     HeraldImage,
}

// Container-level reasons, as the real kubelet spells them.
const (
	ReasonErrImagePull               = "ErrImagePull"
	ReasonCreateContainerConfigError = "CreateContainerConfigError"
	ReasonCreateContainerError       = "CreateContainerError"
	ReasonContainerCreating          = "ContainerCreating"
	ReasonPodInitializing            = "PodInitializing"
	ReasonCrashLoopBackOff           = "CrashLoopBackOff"
	ReasonCompleted                  = "Completed"
	ReasonError                      = "Error"
)

// containerError is why a container cannot start: a Waiting reason and
// message for its status.
type containerError struct {
	Reason, Message string
}

func (e *containerError) Error() string { return e.Reason + ": " + e.Message }

// imageKind is the program behind an image reference.
func imageKind(image string) (ImageKind, bool) {
	if k, ok := KnownImages[image]; ok {
		return k, true
	}
	if _, ok := imageTag(image, HeraldRepository); ok {
		return HeraldImage, true
	}
	if _, ok := imageTag(image, KubeProxyRepository); ok {
		return KubeProxyImage, true
	}
	return "", false
}

// imageTag is the tag (or @digest) of image when image is repository
// with one.
func imageTag(image, repository string) (string, bool) {
	rest, ok := strings.CutPrefix(image, repository)
	if !ok || len(rest) < 2 || (rest[0] != ':' && rest[0] != '@') || strings.Contains(rest, "/") {
		return "", false
	}
	if rest[0] == '@' {
		return rest, true
	}
	return rest[1:], true
}

// knownImageList names the known images for messages.
func knownImageList() string {
	names := make([]string, 0, len(KnownImages))
	for n := range KnownImages {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// Programs are the binaries behind the known images.
type Programs struct {
	EchoServer string
	Herald     string
	// KubeProxy is kube-proxy of release KubeProxyVersion (the lab's
	// Kubernetes release; Config.validate defaults it to the kubelet's
	// version, as both come from the same multi-call binary).
	KubeProxy        string
	KubeProxyVersion string
}

// command resolves what runs for container c: the binary and its
// arguments, with $(VAR) references in command and args expanded from
// env (as the real kubelet does).
func (p Programs) command(c *v1.Container, env map[string]string) (string, []string, error) {
	kind, ok := imageKind(c.Image)
	if !ok {
		return "", nil, &containerError{Reason: ReasonErrImagePull, Message: fmt.Sprintf(
			"the lab kubelet cannot run image %q: there is no registry or container runtime in the lab; it runs only %s, any tag of %s and %s",
			c.Image, knownImageList(), HeraldRepository, p.kubeProxyImages())}
	}
	expand := func(list []string) []string {
		out := make([]string, len(list))
		for i, s := range list {
			out[i] = Expand(s, env)
		}
		return out
	}
	switch kind {
	case EchoServerImage:
		// The real image runs nginx with its own configuration; a
		// command or args would be nginx's, so they are ignored.
		if p.EchoServer == "" {
			return "", nil, &containerError{Reason: ReasonCreateContainerError, Message: "the lab kubelet has no echoserver binary (--echoserver)"}
		}
		return p.EchoServer, nil, nil
	case HeraldImage:
		if p.Herald == "" {
			return "", nil, &containerError{Reason: ReasonCreateContainerError, Message: "the lab kubelet has no herald binary (--herald)"}
		}
		args := expand(c.Args)
		if len(c.Command) > 0 {
			cmd := expand(c.Command)
			if path.Base(cmd[0]) != "herald" {
				return "", nil, &containerError{Reason: ReasonCreateContainerError, Message: fmt.Sprintf(
					"image %s holds only /herald; command %q cannot run in the lab", c.Image, cmd[0])}
			}
			args = append(cmd[1:], args...)
		}
		return p.Herald, args, nil
	case KubeProxyImage:
		return p.kubeProxyCommand(c, expand)
	}
	return "", nil, fmt.Errorf("image kind %q", kind)
}

// kubeProxyImages names the kube-proxy images the kubelet runs, for
// messages.
func (p Programs) kubeProxyImages() string {
	if p.KubeProxyVersion == "" {
		return "any tag of " + KubeProxyRepository
	}
	return KubeProxyImageName(p.KubeProxyVersion)
}

// kubeProxyCommand runs the kube-proxy image. The image holds the binary
// at /usr/local/bin/kube-proxy and a DaemonSet names it in command (as
// kubeadm's does), so the command must run kube-proxy; the lab runs its
// own kube-proxy with the rest of command and args.
func (p Programs) kubeProxyCommand(c *v1.Container, expand func([]string) []string) (string, []string, error) {
	if p.KubeProxy == "" {
		return "", nil, &containerError{Reason: ReasonCreateContainerError, Message: "the lab kubelet has no kube-proxy binary (--kube-proxy)"}
	}
	if tag, _ := imageTag(c.Image, KubeProxyRepository); p.KubeProxyVersion != "" && tag != p.KubeProxyVersion {
		return "", nil, &containerError{Reason: ReasonErrImagePull, Message: fmt.Sprintf(
			"the lab kubelet cannot run image %q: it runs only %s, the lab's own release; there is no other kube-proxy in the lab", c.Image, p.kubeProxyImages())}
	}
	cmd := expand(c.Command)
	if len(cmd) == 0 || path.Base(cmd[0]) != "kube-proxy" {
		return "", nil, &containerError{Reason: ReasonCreateContainerError, Message: fmt.Sprintf(
			"image %s: the lab runs only its kube-proxy, for a command that names it (/usr/local/bin/kube-proxy); command %q", c.Image, cmd)}
	}
	return p.KubeProxy, append(cmd[1:], expand(c.Args)...), nil
}

// Expand replaces $(NAME) in s with env's NAME, as Kubernetes expands
// command, args and env values: an undefined $(NAME) stays as written,
// and $$ is a literal $ (so $$(NAME) yields $(NAME)).
func Expand(s string, env map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] == '$' && i+1 < len(s) {
			switch s[i+1] {
			case '$':
				b.WriteByte('$')
				i += 2
				continue
			case '(':
				if j := strings.IndexByte(s[i+2:], ')'); j >= 0 {
					name := s[i+2 : i+2+j]
					if v, ok := env[name]; ok {
						b.WriteString(v)
					} else {
						b.WriteString(s[i : i+3+j])
					}
					i += 3 + j
					continue
				}
			}
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}
