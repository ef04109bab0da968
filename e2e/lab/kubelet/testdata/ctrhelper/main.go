// Command ctrhelper is the only program of the tiny image the kubelet's
// root tests run under runc (built static, so the image needs no libc).
//
//	ctrhelper exit N    exits with N
//	ctrhelper sleep     waits for a signal
//	ctrhelper cat FILE  prints FILE, then waits for a signal
//	ctrhelper readlink PATH  prints where the symlink PATH points, and exits
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
)

func main() {
	// Handle SIGTERM before the first line is printed, so a test that
	// has seen the line knows a stop now ends the program with 143.
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM)
	fmt.Println("ctrhelper", os.Args[1:], "uid", os.Getuid(), "gid", os.Getgid())
	if len(os.Args) < 2 {
		os.Exit(2)
	}
	switch os.Args[1] {
	case "exit":
		n, _ := strconv.Atoi(os.Args[2])
		os.Exit(n)
	case "cat":
		data, err := os.ReadFile(os.Args[2])
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Printf("%s", data)
	case "readlink":
		target, err := os.Readlink(os.Args[2])
		fmt.Println("readlink:", target, err)
		os.Exit(0)
	}
	// As PID 1 of its namespace a process gets only the signals it
	// handles: exit like an unhandled SIGTERM would.
	<-c
	os.Exit(143)
}
