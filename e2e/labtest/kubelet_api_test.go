package labtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/herald-lb/herald/e2e/harness"
	"github.com/herald-lb/herald/e2e/lab/cluster"
	"github.com/herald-lb/herald/e2e/lab/kubeconfig"
	"github.com/herald-lb/herald/e2e/lab/kubelet"
	"github.com/herald-lb/herald/e2e/lab/pki"
	"github.com/herald-lb/herald/e2e/lab/topology"
)

const kubeletAPIPod = `
apiVersion: v1
kind: Pod
metadata:
  name: kubelet-api-echo
  labels: {app: kubelet-api-echo}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: echoserver
    image: registry.k8s.io/echoserver:1.4
`

// kubeletAPISuite is what TestKubeletAPI's steps share: the lab, the
// echo pod and its node.
type kubeletAPISuite struct {
	lab  *harness.T
	ctx  context.Context
	pod  v1.Pod
	node topology.Node
}

// TestKubeletAPI uses the lab kubelet's API the way a user does, through
// the API server: kubectl exec (with and without stdin and a terminal),
// kubectl logs (and -f), kubectl port-forward, the node proxy's healthz
// and run; and directly on :10250, that only authenticated and
// authorized clients get in.
func TestKubeletAPI(t *testing.T) {
	lab := harness.Start(t)
	ctx := lab.Ctx
	lab.Apply(kubeletAPIPod)
	t.Cleanup(func() { lab.DeletePods("kubelet-api-echo") })
	pods, _ := lab.ReadyPods("app=kubelet-api-echo", 1, 2*time.Minute)
	pod := pods[0]
	node := lab.Node(pod.Spec.NodeName)

	n, err := lab.CS.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := n.Status.DaemonEndpoints.KubeletEndpoint.Port; p != kubelet.DefaultPort {
		t.Errorf("node %s: kubelet endpoint port %d, want %d", node.Name, p, kubelet.DefaultPort)
	}
	ka := &kubeletAPISuite{lab: lab, ctx: ctx, pod: pod, node: node}

	t.Run("healthz", func(t *testing.T) {
		out := lab.Kubectl("get", "--raw", "/api/v1/nodes/"+node.Name+"/proxy/healthz")
		if out != "ok" {
			t.Errorf("healthz through the API server: %q", out)
		}
	})

	t.Run("exec", ka.checkExec)

	t.Run("exec-terminal", ka.checkExecTerminal)

	t.Run("run", func(t *testing.T) {
		out, err := lab.CS.CoreV1().RESTClient().Post().
			AbsPath("/api/v1/nodes", node.Name, "proxy/run/default", pod.Name, "echoserver").
			Param("cmd", "echo run works").DoRaw(ctx)
		if err != nil || string(out) != "run works\n" {
			t.Errorf("/run through the node proxy: %q %v", out, err)
		}
	})

	t.Run("logs", ka.checkLogs)

	t.Run("port-forward", ka.checkPortForward)

	// In image mode herald's pods run under runc: exec goes inside the
	// container (its own PID namespace, where herald is PID 1).
	t.Run("image-mode", ka.checkImageMode)

	t.Run("authorization", ka.checkAuthorization)
}

// checkExec checks kubectl exec: in the pod's network namespace, exit
// code, stdout and stderr, stdin, a missing container.
func (ka *kubeletAPISuite) checkExec(t *testing.T) {
	// The command runs in the pod's network namespace: it sees the
	// pod's address on eth0.
	stdout, stderr, code := runKubectl(t, ka.lab, nil, "exec", ka.pod.Name, "--", "sh", "-c",
		"ip -o -4 addr show dev eth0; echo to-stderr >&2; exit 7")
	if code != 7 || !strings.Contains(stdout, " "+ka.pod.Status.PodIP+"/") || !strings.Contains(stderr, "to-stderr") {
		t.Errorf("exit code %d (want 7), stdout %q (want the pod's IP %s), stderr %q", code, stdout, ka.pod.Status.PodIP, stderr)
	}
	if _, _, code := runKubectl(t, ka.lab, nil, "exec", ka.pod.Name, "--", "true"); code != 0 {
		t.Errorf("exec true: exit code %d", code)
	}
	stdout, _, code = runKubectl(t, ka.lab, strings.NewReader("line1\nline2\n"), "exec", "-i", ka.pod.Name, "--", "sh", "-c", "cat; echo end")
	if code != 0 || stdout != "line1\nline2\nend\n" {
		t.Errorf("exec -i: exit code %d, stdout %q", code, stdout)
	}
	_, stderr, code = runKubectl(t, ka.lab, nil, "exec", ka.pod.Name, "-c", "nope", "--", "true")
	if code == 0 || !strings.Contains(stderr, `container nope is not valid`) && !strings.Contains(stderr, `"nope" not found`) {
		t.Errorf("exec in a missing container: exit code %d, stderr %q", code, stderr)
	}
}

// checkExecTerminal checks kubectl exec -it, and a terminal size that
// follows the client's.
func (ka *kubeletAPISuite) checkExecTerminal(t *testing.T) {
	// kubectl exec -it needs a terminal of its own: script(1) gives
	// it one.
	kc := fmt.Sprintf("%s --kubeconfig=%s exec -it %s -- sh -c 'tty; read x; echo got:$x'", ka.lab.Lab.KubectlPath, ka.lab.Lab.Kubeconfig, ka.pod.Name)
	cmd := exec.CommandContext(ka.ctx, "script", "-qec", kc, "/dev/null")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(stdin, "hello\r")
	err = waitTimeout(cmd, 30*time.Second)
	stdin.Close()
	got := strings.ReplaceAll(out.String(), "\r\n", "\n")
	if err != nil || !strings.Contains(got, "/dev/pts/") || !strings.Contains(got, "got:hello\n") {
		t.Errorf("kubectl exec -it: %v; output %q", err, got)
	}

	// The terminal's size follows the client's.
	page := execTTY(t, ka.lab, ka.pod, remotecommand.TerminalSize{Width: 77, Height: 33},
		`n=0; while [ "$(stty size)" != "33 77" ] && [ $n -lt 200 ]; do sleep 0.05; n=$((n+1)); done; stty size; test -t 0 && echo stdin-is-a-terminal`)
	if got := strings.ReplaceAll(page, "\r\n", "\n"); got != "33 77\nstdin-is-a-terminal\n" {
		t.Errorf("exec with a 77x33 terminal: %q", got)
	}
}

// checkLogs checks kubectl logs: the program's output, -f, --tail and
// --previous.
func (ka *kubeletAPISuite) checkLogs(t *testing.T) {
	out := ka.lab.Kubectl("logs", ka.pod.Name)
	if !strings.Contains(out, "echoserver: listening on") || strings.Contains(out, "===") {
		t.Errorf("kubectl logs: want the program's output only, got %q", out)
	}
	// -f shows a request's access-log line as it happens.
	cmd := exec.CommandContext(ka.ctx, ka.lab.Lab.KubectlPath, "--kubeconfig="+ka.lab.Lab.Kubeconfig, "logs", "-f", ka.pod.Name)
	cmd.Stderr = t.Output()
	lines := streamLines(t, cmd)
	defer stop(cmd)
	waitLine(t, lines, "echoserver: listening on", 30*time.Second)
	path := "/follow-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := harness.HTTPGetFrom(ka.node.Netns, "http://"+net.JoinHostPort(ka.pod.Status.PodIP, "8080")+path); err != nil {
		t.Fatal(err)
	}
	waitLine(t, lines, "GET "+path+" ", 30*time.Second)
	if out := ka.lab.Kubectl("logs", "--tail=1", ka.pod.Name); !strings.Contains(out, "GET "+path+" ") || strings.Count(out, "\n") != 1 {
		t.Errorf("kubectl logs --tail=1: %q", out)
	}
	_, stderr, code := runKubectl(t, ka.lab, nil, "logs", "--previous", ka.pod.Name)
	if code == 0 || !strings.Contains(stderr, "previous terminated container") {
		t.Errorf("kubectl logs --previous of a container that never restarted: exit code %d, %q", code, stderr)
	}
}

// checkPortForward checks two connections through one kubectl
// port-forward.
func (ka *kubeletAPISuite) checkPortForward(t *testing.T) {
	cmd := exec.CommandContext(ka.ctx, ka.lab.Lab.KubectlPath, "--kubeconfig="+ka.lab.Lab.Kubeconfig, "port-forward", "--address=127.0.0.1", "pod/"+ka.pod.Name, ":8080")
	cmd.Stderr = t.Output()
	lines := streamLines(t, cmd)
	defer stop(cmd)
	line := waitLine(t, lines, "Forwarding from 127.0.0.1:", 30*time.Second)
	m := regexp.MustCompile(`127\.0\.0\.1:(\d+) -> 8080`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no local port in %q", line)
	}
	// Two connections through one forward; the pod sees them come
	// from its own localhost.
	for _, p := range []string{"/through-port-forward", "/again"} {
		resp, err := http.Get("http://127.0.0.1:" + m[1] + p)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "real path="+p+"\n") || !strings.Contains(string(body), "client_address=127.0.0.1\n") {
			t.Errorf("GET %s through kubectl port-forward: %s", p, body)
		}
	}
}

// checkImageMode checks exec and logs in herald's pods running under runc.
func (ka *kubeletAPISuite) checkImageMode(t *testing.T) {
	if !ka.lab.Lab.ImageMode {
		t.Skipf("binary mode: herald's pods run the host's binary (%s=1 runs them from the image)", cluster.ImageModeEnv)
	}
	hp, err := ka.lab.CS.CoreV1().Pods("herald-system").List(ka.ctx, metav1.ListOptions{})
	if err != nil || len(hp.Items) == 0 {
		t.Fatalf("herald's pods: %v (%d)", err, len(hp.Items))
	}
	name := hp.Items[0].Name
	stdout, _, code := runKubectl(t, ka.lab, nil, "exec", "-n", "herald-system", name, "--", "sh", "-c", `tr '\0' ' ' < /proc/1/cmdline; echo; exit 3`)
	if f := strings.Fields(stdout); code != 3 || len(f) == 0 || !strings.HasSuffix(f[0], "herald") {
		t.Errorf("exec in %s: exit code %d (want 3), PID 1 %q (want herald)", name, code, stdout)
	}
	if out := ka.lab.Kubectl("logs", "-n", "herald-system", "--tail=3", name); strings.TrimSpace(out) == "" {
		t.Errorf("kubectl logs of %s: nothing", name)
	}
}

// checkAuthorization checks that only authenticated and authorized
// clients get into the kubelet's port.
func (ka *kubeletAPISuite) checkAuthorization(t *testing.T) {
	ca, err := pki.LoadCA(ka.lab.Lab.ControlPlane.PKIDir(), "ca")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + net.JoinHostPort(ka.node.IPv4.String(), strconv.Itoa(kubelet.DefaultPort)) + "/healthz"
	rc, err := kubeconfig.RESTConfig(ka.lab.Lab.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := tls.X509KeyPair(rc.CertData, rc.KeyData)
	if err != nil {
		t.Fatalf("the admin kubeconfig's client certificate: %v", err)
	}
	nobody, err := ca.Issue(pki.CertSpec{CommonName: "kubelet-api-e2e-nobody", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	nobodyCert, _ := nobody.TLSCertificate()
	other, _ := pki.NewCA("not-the-lab-ca")
	stranger, _ := other.Issue(pki.CertSpec{CommonName: "herald-lab-admin", Organizations: []string{"system:masters"}, Client: true})
	strangerCert, _ := stranger.TLSCertificate()
	// A token is checked with a TokenReview: the default service
	// account's is valid, but grants nothing on nodes.
	tr, err := ka.lab.CS.CoreV1().ServiceAccounts("default").CreateToken(ka.ctx, "default", &authv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		cert   *tls.Certificate
		token  string
		status int
		body   string
	}{
		{"no client certificate", nil, "", 401, "Unauthorized"},
		{"a user without nodes/proxy", &nobodyCert, "", 403, "Forbidden (user=kubelet-api-e2e-nobody, verb=get, resource=nodes, subresource(s)=[healthz proxy])"},
		{"cluster admin", &admin, "", 200, "ok"},
		{"a certificate of another CA", &strangerCert, "", 0, ""},
		{"a service account's token", nil, tr.Status.Token, 403, "Forbidden (user=system:serviceaccount:default:default, verb=get, resource=nodes, subresource(s)=[healthz proxy])"},
		{"a token nobody issued", nil, "not-a-token", 401, "Unauthorized"},
	} {
		// The client checks the kubelet's serving certificate for the
		// node's InternalIP against the lab CA, and presents its
		// certificate even where the kubelet names other CAs.
		cfg := &tls.Config{RootCAs: ca.CertPool(), GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if tc.cert == nil {
				return &tls.Certificate{}, nil
			}
			return tc.cert, nil
		}}
		status, body, err := getFromNetns(ka.lab.Layout.Client, url, cfg, tc.token)
		switch {
		case tc.status == 0 && err == nil:
			t.Errorf("%s: got an answer (%d %q), want the TLS handshake refused", tc.name, status, body)
		case tc.status != 0 && (err != nil || status != tc.status || strings.TrimSpace(body) != tc.body):
			t.Errorf("%s: %d %q %v, want %d %q", tc.name, status, body, err, tc.status, tc.body)
		default:
			t.Logf("%s: %d %q %v", tc.name, status, strings.TrimSpace(body), err)
		}
	}
}

// runKubectl runs kubectl and returns its stdout, stderr and exit code.
func runKubectl(t *testing.T, lab *harness.T, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.CommandContext(lab.Ctx, lab.Lab.KubectlPath, append([]string{"--kubeconfig=" + lab.Lab.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("kubectl %v: %v", args, err)
	}
	t.Logf("$ kubectl %s\n%s%s(exit code %d)", strings.Join(args, " "), stdout.String(), stderr.String(), cmd.ProcessState.ExitCode())
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// fixedSize is a terminal that has one size.
type fixedSize chan remotecommand.TerminalSize

func (f fixedSize) Next() *remotecommand.TerminalSize {
	s, ok := <-f
	if !ok {
		return nil
	}
	return &s
}

// execTTY runs script in the pod on a terminal of the given size,
// through the API server's pods/exec, and returns what it printed.
func execTTY(t *testing.T, lab *harness.T, pod v1.Pod, size remotecommand.TerminalSize, script string) string {
	t.Helper()
	rc, err := kubeconfig.RESTConfig(lab.Lab.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	req := lab.CS.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&v1.PodExecOptions{Container: "echoserver", Command: []string{"sh", "-c", script}, Stdout: true, TTY: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(rc, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	sizes := make(fixedSize, 1)
	sizes <- size
	close(sizes)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(lab.Ctx, 30*time.Second)
	defer cancel()
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Tty: true, TerminalSizeQueue: sizes}); err != nil {
		t.Errorf("exec with a terminal: %v (output %q)", err, out.String())
	}
	return out.String()
}

// streamLines starts cmd and sends each line of its stdout.
func streamLines(t *testing.T, cmd *exec.Cmd) <-chan string {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	return lines
}

// waitLine waits for a line containing want and returns it.
func waitLine(t *testing.T, lines <-chan string, want string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	var seen []string
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended without %q; it had %q", want, seen)
			}
			if strings.Contains(l, want) {
				return l
			}
			seen = append(seen, l)
		case <-deadline:
			t.Fatalf("no %q after %s; output %q", want, timeout, seen)
		}
	}
}

func stop(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

func waitTimeout(cmd *exec.Cmd, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		return fmt.Errorf("still running after %s: %v", d, <-done)
	}
}

// getFromNetns sends GET url over TLS from inside network namespace ns,
// with a bearer token unless it is empty.
func getFromNetns(ns, url string, cfg *tls.Config, token string) (int, string, error) {
	tr := harness.NetnsTransport(ns)
	tr.TLSClientConfig = cfg
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
