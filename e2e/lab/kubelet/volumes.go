package kubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServiceAccountDir is where the ServiceAccount admission plugin mounts a
// pod's API credentials (token, ca.crt, namespace).
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Pods share the machine's root filesystem, so a volume is mounted by a
// bind mount inside the container's private mount namespace (the one `ip
// netns exec` gives it). A bind mount needs an existing directory to
// cover, and the kubelet never creates directories on the shared root
// for a pod: mount paths that do not exist are skipped with a warning.
// The service-account path is the exception the lab prepares once
// (EnsureMountPoints), because every pod that talks to the API needs it.

// EnsureMountPoints creates ServiceAccountDir on the machine if it is
// missing and returns the directories it created, deepest last, for
// RemoveMountPoints.
func EnsureMountPoints() ([]string, error) {
	var created []string
	dir := ServiceAccountDir
	var missing []string
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return created, fmt.Errorf("mount point %s: %w", missing[i], err)
		}
		created = append(created, missing[i])
	}
	return created, nil
}

// RemoveMountPoints removes the directories EnsureMountPoints created,
// deepest first, if they are empty.
func RemoveMountPoints(created []string) error {
	var errs []error
	for i := len(created) - 1; i >= 0; i-- {
		if err := os.Remove(created[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// bind is one mount for a container: Source (a directory the kubelet
// wrote) over Target, read-only unless RW.
type bind struct {
	Source, Target string
	RW             bool
}

// volumeWriter materializes a pod's volumes under dir/volumes/<name>.
type volumeWriter struct {
	k   *Kubelet
	pod *v1.Pod
	dir string
	// ips answer downward-API items.
	ips podAddrs
}

func (vw volumeWriter) volumeDir(name string) string {
	return filepath.Join(vw.dir, "volumes", name)
}

// binds writes the volumes container c mounts and returns the bind mounts
// for it, plus warnings for mounts the lab cannot make. In image mode the
// container has its own root filesystem, so every volume is mounted,
// hostPath volumes too, wherever the container says.
func (vw volumeWriter) binds(ctx context.Context, c *v1.Container, image bool) ([]bind, []string, error) {
	vols := map[string]*v1.Volume{}
	for i := range vw.pod.Spec.Volumes {
		vols[vw.pod.Spec.Volumes[i].Name] = &vw.pod.Spec.Volumes[i]
	}
	var out []bind
	var warnings []string
	for _, m := range c.VolumeMounts {
		vol, ok := vols[m.Name]
		if !ok {
			return nil, nil, configErr("volumeMounts %s: no volume of that name in the pod", m.Name)
		}
		if vol.HostPath != nil && image {
			b, err := hostPathBind(m, vol.HostPath)
			if err != nil {
				return nil, nil, fmt.Errorf("volume %s: %w", m.Name, err)
			}
			out = append(out, b)
			continue
		}
		if vol.HostPath != nil {
			// Pods share the machine's root filesystem in the lab, so a
			// host path mounted at its own path is already in place
			// (herald's proxy mounts /run/xtables.lock that way).
			if m.MountPath != vol.HostPath.Path {
				warnings = append(warnings, fmt.Sprintf("volume %s: hostPath %s can only be mounted at the same path in the lab; not mounted at %s", m.Name, vol.HostPath.Path, m.MountPath))
			}
			continue
		}
		if m.SubPath != "" || m.SubPathExpr != "" {
			warnings = append(warnings, fmt.Sprintf("volume %s: subPath is not supported by the lab kubelet; not mounted", m.Name))
			continue
		}
		if fi, err := os.Stat(m.MountPath); !image && (err != nil || !fi.IsDir()) {
			warnings = append(warnings, fmt.Sprintf("volume %s: mount path %s does not exist on the lab's shared root filesystem; not mounted", m.Name, m.MountPath))
			continue
		}
		src := vw.volumeDir(m.Name)
		if err := vw.write(ctx, vol, src); err != nil {
			return nil, nil, err
		}
		out = append(out, bind{Source: src, Target: m.MountPath, RW: !m.ReadOnly && vol.EmptyDir != nil})
	}
	return out, warnings, nil
}

// write fills dir with the volume's files; it is called before every
// container start and by the token refresher, so files are replaced
// atomically.
func (vw volumeWriter) write(ctx context.Context, vol *v1.Volume, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string][]byte{}
	var err error
	switch {
	case vol.EmptyDir != nil:
		return nil
	case vol.Projected != nil:
		for _, s := range vol.Projected.Sources {
			if err = vw.projection(ctx, s, files); err != nil {
				break
			}
		}
	case vol.Secret != nil:
		err = vw.secretFiles(ctx, vol.Secret.SecretName, vol.Secret.Items, vol.Secret.Optional, files)
	case vol.ConfigMap != nil:
		err = vw.configMapFiles(ctx, vol.ConfigMap.Name, vol.ConfigMap.Items, vol.ConfigMap.Optional, files)
	case vol.DownwardAPI != nil:
		err = vw.downwardFiles(vol.DownwardAPI.Items, files)
	default:
		return configErr("volume %s: this volume type is not supported by the lab kubelet", vol.Name)
	}
	if err != nil {
		return fmt.Errorf("volume %s: %w", vol.Name, err)
	}
	return writeFiles(dir, files)
}

func (vw volumeWriter) projection(ctx context.Context, s v1.VolumeProjection, files map[string][]byte) error {
	switch {
	case s.ServiceAccountToken != nil:
		tok, err := vw.token(ctx, s.ServiceAccountToken)
		if err != nil {
			return err
		}
		files[s.ServiceAccountToken.Path] = []byte(tok)
		return nil
	case s.ConfigMap != nil:
		return vw.configMapFiles(ctx, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional, files)
	case s.Secret != nil:
		return vw.secretFiles(ctx, s.Secret.Name, s.Secret.Items, s.Secret.Optional, files)
	case s.DownwardAPI != nil:
		return vw.downwardFiles(s.DownwardAPI.Items, files)
	}
	return errors.New("projected source of a kind the lab kubelet does not support")
}

// token asks the API server for a token bound to the pod, as the real
// kubelet does (the Node authorizer allows it for pods on this node).
func (vw volumeWriter) token(ctx context.Context, p *v1.ServiceAccountTokenProjection) (string, error) {
	sa := vw.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		ExpirationSeconds: p.ExpirationSeconds,
		BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: vw.pod.Name, UID: vw.pod.UID},
	}}
	if p.Audience != "" {
		req.Spec.Audiences = []string{p.Audience}
	}
	// The last token, until it expires, while the API server is away.
	key := fmt.Sprintf("token/%s/%s/%s/%d", vw.pod.UID, sa, p.Audience, ptrValue(p.ExpirationSeconds))
	tok, err := remember(&vw.k.known, key, func() (string, time.Time, error) {
		tr, err := vw.k.client.CoreV1().ServiceAccounts(vw.pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
		if err != nil {
			return "", time.Time{}, err
		}
		return tr.Status.Token, tr.Status.ExpirationTimestamp.Time, nil
	})
	if err != nil {
		return "", fmt.Errorf("token for service account %s/%s: %w", vw.pod.Namespace, sa, err)
	}
	return tok, nil
}

func (vw volumeWriter) configMapFiles(ctx context.Context, name string, items []v1.KeyToPath, optional *bool, files map[string][]byte) error {
	cm, err := vw.k.ConfigMap(ctx, vw.pod.Namespace, name)
	if apierrors.IsNotFound(err) && isTrue(optional) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("configmap %s: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return pickKeys("configmap "+name, data, items, files)
}

func (vw volumeWriter) secretFiles(ctx context.Context, name string, items []v1.KeyToPath, optional *bool, files map[string][]byte) error {
	s, err := vw.k.Secret(ctx, vw.pod.Namespace, name)
	if apierrors.IsNotFound(err) && isTrue(optional) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("secret %s: %w", name, err)
	}
	return pickKeys("secret "+name, s.Data, items, files)
}

func pickKeys(what string, data map[string][]byte, items []v1.KeyToPath, files map[string][]byte) error {
	if len(items) == 0 {
		for k, v := range data {
			files[k] = v
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("%s has no key %q", what, it.Key)
		}
		files[it.Path] = v
	}
	return nil
}

func (vw volumeWriter) downwardFiles(items []v1.DownwardAPIVolumeFile, files map[string][]byte) error {
	for _, it := range items {
		if it.FieldRef == nil {
			return fmt.Errorf("downwardAPI %s: only fieldRef is supported by the lab kubelet", it.Path)
		}
		v, err := fieldValue(vw.pod, vw.ips, it.FieldRef.FieldPath)
		if err != nil {
			return fmt.Errorf("downwardAPI %s: %w", it.Path, err)
		}
		files[it.Path] = []byte(v)
	}
	return nil
}

// writeFiles writes each file through a temporary name and a rename, so a
// reader never sees half a token.
func writeFiles(dir string, files map[string][]byte) error {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if strings.Contains(n, "..") || filepath.IsAbs(n) {
			return fmt.Errorf("file path %q leaves the volume", n)
		}
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, files[n], 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, p); err != nil {
			return err
		}
	}
	return nil
}

// TokenRefresh is how often the kubelet rewrites projected volumes, so
// tokens are renewed well before the shortest expiry the API server
// grants (10 minutes).
var TokenRefresh = 5 * time.Minute

// refreshVolumes rewrites the pod's projected volumes until ctx ends.
func (vw volumeWriter) refreshVolumes(ctx context.Context) {
	t := time.NewTicker(TokenRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i := range vw.pod.Spec.Volumes {
			vol := &vw.pod.Spec.Volumes[i]
			if vol.Projected == nil {
				continue
			}
			dir := vw.volumeDir(vol.Name)
			if _, err := os.Stat(dir); err != nil {
				continue // not mounted by any container
			}
			if err := vw.write(ctx, vol, dir); err != nil && ctx.Err() == nil {
				vw.k.logf("pod %s/%s: refreshing volume %s: %v", vw.pod.Namespace, vw.pod.Name, vol.Name, err)
			}
		}
	}
}

// MountExecCommand is the lab-kubelet subcommand that makes a container's
// bind mounts and then becomes the container's program.
const MountExecCommand = "mount-exec"

// mountExecArgs renders the wrapper's arguments: --bind SRC:TARGET[:rw]...
// -- program args...
func mountExecArgs(binds []bind, program string, args []string) []string {
	out := []string{MountExecCommand}
	for _, b := range binds {
		spec := b.Source + ":" + b.Target
		if b.RW {
			spec += ":rw"
		}
		out = append(out, "--bind", spec)
	}
	out = append(out, "--", program)
	return append(out, args...)
}

// MountExec runs inside the container's private mount namespace (under
// `ip netns exec`): it makes the bind mounts given on its command line
// and execs the program, keeping its PID. args are what follows the
// subcommand.
func MountExec(args []string, env []string) error {
	var binds []bind
	for len(args) > 0 && args[0] != "--" {
		if args[0] != "--bind" || len(args) < 2 {
			return fmt.Errorf("mount-exec: unexpected argument %q (want --bind SRC:TARGET[:rw] ... -- PROGRAM ARGS)", args[0])
		}
		f := strings.Split(args[1], ":")
		if len(f) < 2 || len(f) > 3 || (len(f) == 3 && f[2] != "rw") {
			return fmt.Errorf("mount-exec: bad --bind %q", args[1])
		}
		binds = append(binds, bind{Source: f[0], Target: f[1], RW: len(f) == 3})
		args = args[2:]
	}
	if len(args) < 2 {
		return errors.New("mount-exec: no program after --")
	}
	for _, b := range binds {
		if err := unix.Mount(b.Source, b.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("mount-exec: bind %s on %s: %w", b.Source, b.Target, err)
		}
		if !b.RW {
			if err := unix.Mount("", b.Target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
				return fmt.Errorf("mount-exec: read-only %s: %w", b.Target, err)
			}
		}
	}
	return unix.Exec(args[1], args[1:], env)
}
