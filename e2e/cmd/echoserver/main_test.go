package main

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain runs the command itself when the test binary is started as a
// child with ECHOSERVER_TEST_MAIN set, so the test below can signal a
// real process.
func TestMain(m *testing.M) {
	if os.Getenv("ECHOSERVER_TEST_MAIN") != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSIGTERMFinishesRequestsInFlight: a request being answered at
// SIGTERM (its handler still reading the body) is answered, not cut off
// by the process's exit. (net/http itself drops a request whose headers
// end after Shutdown began, so the headers are sent whole first.)
func TestSIGTERMFinishesRequestsInFlight(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^$", "-listen", addr)
	cmd.Env = append(os.Environ(), "ECHOSERVER_TEST_MAIN=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // this test's child, by its PID
		<-done
	})
	lines := bufio.NewScanner(stdout)
	waitFor := func(what string) {
		t.Helper()
		for lines.Scan() {
			if strings.Contains(lines.Text(), what) {
				return
			}
		}
		t.Fatalf("the echo server never printed %q", what)
	}
	waitFor("listening on")

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// The headers and half the body: the handler is reading the rest.
	if _, err := c.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the handler starts
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor("shutting down")
	time.Sleep(200 * time.Millisecond) // long enough for an exit that does not wait
	if _, err := c.Write([]byte("cd")); err != nil {
		t.Fatalf("finishing the request after SIGTERM: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the request in flight at SIGTERM got no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for lines.Scan() { // to its end: the process has exited
	}
	select {
	case err := <-done:
		done <- err // for the clean-up
		if err != nil {
			t.Fatalf("the echo server exited with %v after its shutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the echo server did not exit after its last request")
	}
}
