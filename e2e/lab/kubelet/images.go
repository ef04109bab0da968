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

// KnownImages maps the image references the lab kubelet runs to programs;
// imageKind adds every tag of HeraldRepository.
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
	rest, ok := strings.CutPrefix(image, HeraldRepository)
	if ok && len(rest) > 1 && (rest[0] == ':' || rest[0] == '@') && !strings.Contains(rest, "/") {
		return HeraldImage, true
	}
	return "", false
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
}

// command resolves what runs for container c: the binary and its
// arguments, with $(VAR) references in command and args expanded from
// env (as the real kubelet does).
func (p Programs) command(c *v1.Container, env map[string]string) (string, []string, error) {
	kind, ok := imageKind(c.Image)
	if !ok {
		return "", nil, &containerError{Reason: ReasonErrImagePull, Message: fmt.Sprintf(
			"the lab kubelet cannot run image %q: there is no registry or container runtime in the lab; it runs only %s and any tag of %s",
			c.Image, knownImageList(), HeraldRepository)}
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
	}
	return "", nil, fmt.Errorf("image kind %q", kind)
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
