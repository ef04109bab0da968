package kubelet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/utils/exec"
)

func TestExecTargetCommand(t *testing.T) {
	bin := execTarget{pid: 42, dir: "/pods/x"}
	if got, want := bin.command([]string{"sh", "-c", "id"}, true), []string{"nsenter", "--target", "42", "--mount", "--net", "--", "sh", "-c", "id"}; !slices.Equal(got, want) {
		t.Errorf("binary mode: %q, want %q", got, want)
	}
	img := execTarget{pid: 42, runcRoot: "/state/runc", runcID: "c7"}
	if got, want := img.command([]string{"ls"}, false), []string{"runc", "--root", "/state/runc", "exec", "c7", "ls"}; !slices.Equal(got, want) {
		t.Errorf("image mode: %q, want %q", got, want)
	}
	if got, want := img.command([]string{"sh"}, true), []string{"runc", "--root", "/state/runc", "exec", "--tty", "c7", "sh"}; !slices.Equal(got, want) {
		t.Errorf("image mode with a terminal: %q, want %q", got, want)
	}
}

func TestSplitEnviron(t *testing.T) {
	got := splitEnviron([]byte("A=1\x00B=x=y\x00\x00"))
	if want := []string{"A=1", "B=x=y"}; !slices.Equal(got, want) {
		t.Errorf("splitEnviron = %q, want %q", got, want)
	}
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee utilexec.ExitError
	if !errors.As(err, &ee) || !ee.Exited() {
		t.Fatalf("want an exit code, got %v", err)
	}
	return ee.ExitStatus()
}

func TestRunWithPipes(t *testing.T) {
	var out, errOut bytes.Buffer
	c := exec.Command("sh", "-c", "while read l; do echo got:$l; done; echo bad >&2; exit 3")
	err := exitCodeError(runWithPipes(c, strings.NewReader("a\nb\n"), &out, &errOut))
	if code := exitCode(t, err); code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
	if out.String() != "got:a\ngot:b\n" || errOut.String() != "bad\n" {
		t.Errorf("stdout %q stderr %q", out.String(), errOut.String())
	}
}

// A command that exits while the client keeps its stdin open must not
// wait for the client.
func TestRunWithPipesOpenStdin(t *testing.T) {
	in, keepOpen := io.Pipe()
	defer keepOpen.Close()
	done := make(chan error, 1)
	go func() { done <- runWithPipes(exec.Command("true"), in, nil, nil) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting for stdin after the command exited")
	}
}

func TestExitCodeOfSignal(t *testing.T) {
	err := exitCodeError(exec.Command("sh", "-c", "kill -KILL $$").Run())
	if code := exitCode(t, err); code != 137 {
		t.Errorf("exit code %d, want 137", code)
	}
	if err := exitCodeError(errors.New("x")); err.Error() != "x" {
		t.Errorf("other errors pass through: %v", err)
	}
}

func TestRunInTerminal(t *testing.T) {
	resize := make(chan remotecommand.TerminalSize, 1)
	resize <- remotecommand.TerminalSize{Width: 100, Height: 40}
	close(resize)
	var out bytes.Buffer
	// It waits for the size, so the test does not race the resize.
	script := `test -t 0 && test -t 1 && echo terminal; n=0; while [ "$(stty size)" != "40 100" ] && [ $n -lt 200 ]; do sleep 0.05; n=$((n+1)); done; stty size; exit 4`
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := exitCodeError(runInTerminal(exec.CommandContext(ctx, "sh", "-c", script), nil, &out, resize))
	if code := exitCode(t, err); code != 4 {
		t.Errorf("exit code %d, want 4", code)
	}
	// A terminal turns \n into \r\n.
	if got := strings.ReplaceAll(out.String(), "\r\n", "\n"); got != "terminal\n40 100\n" {
		t.Errorf("output %q", got)
	}
}
