// Command lab-flows follows the TCP connections in packet captures taken
// in a client's namespace (tcpdump -w; Ethernet or -i any) and prints,
// per file, how many connections there were, which got no answer (with
// every packet they had) and how many resets came after an answer
// (package lab/flows). It reads the captures of the churn soak and of
// the lab's other probes:
//
//	go run ./cmd/lab-flows -port 80 client.pcap remote.pcap
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/herald-lb/herald/e2e/lab/flows"
)

func main() {
	port := flag.Uint("port", 80, "the servers' TCP port")
	limit := flag.Int("limit", 20, "print at most this many connections without an answer per file")
	flag.Parse()
	if flag.NArg() == 0 || *port == 0 || *port > 65535 {
		fmt.Fprintln(os.Stderr, "usage: lab-flows [-port 80] [-limit 20] FILE.pcap...")
		os.Exit(2)
	}
	failed := false
	for _, name := range flag.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			failed = true
			continue
		}
		res, err := flows.Scan(f, uint16(*port))
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			failed = true
			continue
		}
		fmt.Print(flows.Report(name, res, *limit))
	}
	if failed {
		os.Exit(1)
	}
}
