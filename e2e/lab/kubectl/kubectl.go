// Package kubectl runs the lab's kubectl (the multi-call binary's, which
// matches the API server's version) against a kubeconfig.
package kubectl

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// Kubectl runs one kubectl binary against one kubeconfig.
type Kubectl struct {
	// Path is the kubectl binary (k8sbin.Bin.Tool("kubectl")).
	Path string
	// Kubeconfig is passed as --kubeconfig.
	Kubeconfig string
	// Log, when set, receives each command line and its output.
	Log io.Writer
}

// Error is a failed kubectl command with its combined output.
type Error struct {
	Args   []string
	Output string
	Err    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("kubectl %s: %v\n%s", strings.Join(e.Args, " "), e.Err, strings.TrimSpace(e.Output))
}

func (e *Error) Unwrap() error { return e.Err }

// Run runs kubectl with args and returns its combined stdout and stderr.
func (k *Kubectl) Run(ctx context.Context, args ...string) (string, error) {
	return k.RunStdin(ctx, nil, args...)
}

// RunStdin is Run with stdin (e.g. YAML for `apply -f -`).
func (k *Kubectl) RunStdin(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	full := append([]string{"--kubeconfig=" + k.Kubeconfig}, args...)
	cmd := exec.CommandContext(ctx, k.Path, full...)
	cmd.Stdin = stdin
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if k.Log != nil {
		fmt.Fprintf(k.Log, "$ kubectl %s\n%s", strings.Join(args, " "), withNewline(out.String()))
		if err != nil {
			fmt.Fprintf(k.Log, "(%v)\n", err)
		}
	}
	if err != nil {
		return out.String(), &Error{Args: args, Output: out.String(), Err: err}
	}
	return out.String(), nil
}

// Output runs kubectl and returns only its stdout (for -o jsonpath and
// the like); stderr goes into the error on failure.
func (k *Kubectl) Output(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"--kubeconfig=" + k.Kubeconfig}, args...)
	cmd := exec.CommandContext(ctx, k.Path, full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if k.Log != nil {
		fmt.Fprintf(k.Log, "$ kubectl %s\n%s%s", strings.Join(args, " "), withNewline(stdout.String()), withNewline(stderr.String()))
	}
	if err != nil {
		return stdout.String(), &Error{Args: args, Output: stdout.String() + stderr.String(), Err: err}
	}
	return stdout.String(), nil
}

func withNewline(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}
