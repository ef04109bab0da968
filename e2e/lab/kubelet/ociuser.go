package kubelet

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"
)

// ociUser is the user a container runs as: runAsUser and runAsGroup of
// the container, else the pod's, else the image's USER ("name", "uid",
// "name:group", "uid:gid"), names looked up in the image's /etc/passwd
// and /etc/group; a user without a group gets its passwd group (0 if it
// has none). runAsNonRoot is enforced as the kubelet does.
func ociUser(pod *v1.Pod, c *v1.Container, imageUser string, readFile func(string) ([]byte, error)) (specs.User, error) {
	var podSC v1.PodSecurityContext
	if pod.Spec.SecurityContext != nil {
		podSC = *pod.Spec.SecurityContext
	}
	var sc v1.SecurityContext
	if c.SecurityContext != nil {
		sc = *c.SecurityContext
	}
	uid := firstSet(sc.RunAsUser, podSC.RunAsUser)
	gid := firstSet(sc.RunAsGroup, podSC.RunAsGroup)
	nonRoot := isTrue(firstSet(sc.RunAsNonRoot, podSC.RunAsNonRoot))

	var u specs.User
	imgName, imgGroup, _ := strings.Cut(imageUser, ":")
	switch {
	case uid != nil:
		u.UID = uint32(*uid)
	case imgName == "":
	default:
		if _, err := strconv.ParseUint(imgName, 10, 32); err != nil && nonRoot {
			return u, configErr("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root", imgName)
		}
		n, err := imageID(readFile, "/etc/passwd", imgName)
		if err != nil {
			return u, err
		}
		u.UID = n
	}
	if nonRoot && u.UID == 0 {
		return u, configErr("container has runAsNonRoot and image will run as root")
	}
	switch {
	case gid != nil:
		u.GID = uint32(*gid)
	case imgGroup != "" && uid == nil:
		n, err := imageID(readFile, "/etc/group", imgGroup)
		if err != nil {
			return u, err
		}
		u.GID = n
	default:
		if e, ok := lookupDB(readFile, "/etc/passwd", strconv.FormatUint(uint64(u.UID), 10)); ok {
			u.GID = uint32(e.group)
		}
	}
	for _, g := range podSC.SupplementalGroups {
		u.AdditionalGids = append(u.AdditionalGids, uint32(g))
	}
	if podSC.FSGroup != nil {
		u.AdditionalGids = append(u.AdditionalGids, uint32(*podSC.FSGroup))
	}
	slices.Sort(u.AdditionalGids)
	u.AdditionalGids = slices.Compact(u.AdditionalGids)
	return u, nil
}

// firstSet is the container's setting if it has one, else the pod's.
func firstSet[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// imageID is a user or group of the image's USER as a number: given so,
// or looked up by name in the image's file.
func imageID(readFile func(string) ([]byte, error), file, s string) (uint32, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(n), nil
	}
	e, ok := lookupDB(readFile, file, s)
	if !ok {
		return 0, &containerError{Reason: ReasonCreateContainerError, Message: fmt.Sprintf("the image's user or group %q is not in its %s", s, file)}
	}
	return uint32(e.id), nil
}

// dbEntry is a line of /etc/passwd (id, group) or /etc/group (id).
type dbEntry struct {
	id, group uint64
}

// lookupDB finds key (a name, or a number for the id) in an /etc/passwd-
// or /etc/group-style file of the image; a missing file finds nothing.
func lookupDB(readFile func(string) ([]byte, error), file, key string) (dbEntry, bool) {
	if readFile == nil {
		return dbEntry{}, false
	}
	data, err := readFile(file)
	if err != nil {
		return dbEntry{}, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 || (f[0] != key && f[2] != key) {
			continue
		}
		var e dbEntry
		if e.id, err = strconv.ParseUint(f[2], 10, 32); err != nil {
			continue
		}
		if len(f) > 3 {
			e.group, _ = strconv.ParseUint(f[3], 10, 32)
		}
		return e, true
	}
	return dbEntry{}, false
}
