package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// RunOptions say how to run e2e.test against a cluster.
type RunOptions struct {
	// E2ETest is the suite binary; Ginkgo the ginkgo CLI that runs it in
	// parallel processes (empty: e2e.test alone, one process).
	E2ETest, Ginkgo string
	// Procs is the number of parallel processes (with Ginkgo).
	Procs int
	// Kubeconfig and Kubectl are the cluster's admin kubeconfig and the
	// kubectl the tests shell out to.
	Kubeconfig, Kubectl string
	// Nodes is the cluster's number of schedulable nodes (--num-nodes):
	// the suite counts them in its setup on the first process only, so
	// without it the other parallel processes skip every test that needs
	// two nodes ("Requires at least 2 nodes (not -1)").
	Nodes int
	// ReportDir receives junit_01.xml and the run's output.
	ReportDir string
	Focus     string
	Skip      string
	// Timeout ends the whole run (ginkgo's suite timeout).
	Timeout time.Duration
	// SpecTimeout ends each spec that runs longer (e2e.test's
	// --spec-timeout, upstream/spectimeout_test.go): it is reported as
	// timed out and the run goes on. 0: no bound.
	SpecTimeout time.Duration
	// Netns is the network namespace the suite runs in: the lab's remote
	// client behind the router, a user of the cluster outside the nodes'
	// network (the ESIPP tests check the source IP they see is not in the
	// nodes' /16). Never the host's: the host reaches only the lab's
	// members, and other lab addresses (LoadBalancer IPs) are unreachable
	// from it. Empty: the caller's namespace (unit tests).
	Netns string
	// Args are more e2e.test flags.
	Args []string
	// Out receives the run's console output (also kept in
	// ReportDir/e2e.log).
	Out io.Writer
}

// Command is the command line of the run.
func (o RunOptions) Command() []string {
	e2eArgs := []string{
		"--kubeconfig=" + o.Kubeconfig,
		// The framework's provider for a cluster it knows nothing special
		// about; LoadBalancer Services are served by whatever the cluster
		// runs (herald's controller and speakers in the lab).
		"--provider=local",
		"--kubectl-path=" + o.Kubectl,
		"--report-dir=" + o.ReportDir,
	}
	if o.Nodes > 0 {
		e2eArgs = append(e2eArgs, "--num-nodes="+strconv.Itoa(o.Nodes))
	}
	if o.SpecTimeout > 0 {
		e2eArgs = append(e2eArgs, "--spec-timeout="+o.SpecTimeout.String())
	}
	e2eArgs = append(e2eArgs, o.Args...)
	ginkgoArgs := []string{
		"--focus=" + o.Focus,
		"--no-color",
		"--timeout=" + o.Timeout.String(),
		// A hung spec is reported after this long with where it waits.
		"--poll-progress-after=5m",
	}
	if o.Skip != "" {
		ginkgoArgs = append(ginkgoArgs, "--skip="+o.Skip)
	}
	var cmd []string
	if o.Netns != "" {
		cmd = []string{"ip", "netns", "exec", o.Netns}
	}
	if o.Ginkgo == "" {
		cmd = append(cmd, o.E2ETest)
		for _, a := range ginkgoArgs {
			cmd = append(cmd, "--ginkgo."+a[2:])
		}
		return append(cmd, e2eArgs...)
	}
	cmd = append(cmd, o.Ginkgo, "run", "--procs="+strconv.Itoa(max(o.Procs, 1)))
	cmd = append(cmd, ginkgoArgs...)
	cmd = append(cmd, o.E2ETest, "--")
	return append(cmd, e2eArgs...)
}

// RunSuite runs e2e.test and reads its JUnit report. A run whose tests
// failed is no error; one that wrote no report is.
func RunSuite(ctx context.Context, o RunOptions) ([]Result, time.Duration, error) {
	if err := os.MkdirAll(o.ReportDir, 0o755); err != nil {
		return nil, 0, err
	}
	logFile, err := os.Create(filepath.Join(o.ReportDir, "e2e.log"))
	if err != nil {
		return nil, 0, err
	}
	defer logFile.Close()
	args := o.Command()
	out := io.Writer(logFile)
	if o.Out != nil {
		out = io.MultiWriter(logFile, o.Out)
	}
	fmt.Fprintf(out, "conformance: %q\n", args)
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	// Cancelled (^C), the run is interrupted as ginkgo expects, so it
	// still cleans up and writes its report; one that hangs past that is
	// killed.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 2 * time.Minute
	start := time.Now()
	runErr := cmd.Run()
	took := time.Since(start)
	report := filepath.Join(o.ReportDir, "junit_01.xml")
	f, err := os.Open(report)
	if err != nil {
		return nil, took, fmt.Errorf("e2e.test wrote no report (%s): %w (the run: %v; its output: %s)", report, err, runErr, logFile.Name())
	}
	defer f.Close()
	res, err := ParseJUnit(f)
	if err != nil {
		return nil, took, err
	}
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		return res, took, runErr
	}
	return res, took, nil
}

// Selection is the tests a run with focus and skip executes, as ginkgo
// itself selects them: a dry run of e2e.test (no cluster needed) whose
// report lists them as passed.
func Selection(ctx context.Context, e2eTest, focus, skip, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	o := RunOptions{E2ETest: e2eTest, Kubeconfig: os.DevNull, Kubectl: "kubectl", ReportDir: dir, Focus: focus, Skip: skip, Timeout: time.Minute}
	args := append(o.Command(), "--ginkgo.dry-run")
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("e2e.test dry run: %w: %s", err, tail(string(out), 2000))
	}
	f, err := os.Open(filepath.Join(dir, "junit_01.xml"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	res, err := ParseJUnit(f)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, r := range res {
		if r.Outcome == Pass {
			names = append(names, r.Name)
		}
	}
	return names, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
