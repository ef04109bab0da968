// Command echoserver is the lab's stand-in for the echoserver:1.4 image:
// an HTTP server on :8080 answering every request with `CLIENT VALUES:`,
// `client_address=<peer IP>` and the request's details (package
// lab/echoserver). The lab kubelet runs it inside a pod's network
// namespace. It logs one line per request on stdout, like nginx's access
// log, and shuts down cleanly on SIGTERM. With ECHOSERVER_UDP_PORT set it
// also answers UDP datagrams there (hostname= and client_address=).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/herald-lb/herald/e2e/lab/echoserver"
)

func main() {
	listen := flag.String("listen", ":"+strconv.Itoa(echoserver.DefaultPort), "address to listen on")
	flag.Parse()
	log.SetFlags(0)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("echoserver: %v", err)
	}
	h := echoserver.Handler{}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r)
			fmt.Printf("%s - - [%s] %q 200\n", r.RemoteAddr, time.Now().Format("02/Jan/2006:15:04:05 -0700"),
				r.Method+" "+r.URL.RequestURI()+" "+r.Proto)
		}),
		ReadHeaderTimeout: 30 * time.Second,
	}
	fmt.Printf("echoserver: listening on %s (pid %d)\n", ln.Addr(), os.Getpid())
	if port := os.Getenv(echoserver.EnvUDPPort); port != "" {
		pc, err := net.ListenPacket("udp", ":"+port)
		if err != nil {
			log.Fatalf("echoserver: %s: %v", echoserver.EnvUDPPort, err)
		}
		defer pc.Close()
		host, _ := os.Hostname()
		if h := os.Getenv("HOSTNAME"); h != "" {
			host = h // the pod's name; the lab shares the machine's UTS namespace
		}
		fmt.Printf("echoserver: answering UDP on %s as %s\n", pc.LocalAddr(), host)
		go func() {
			if err := echoserver.ServeUDP(pc, host); err != nil {
				log.Fatalf("echoserver: udp: %v", err)
			}
		}()
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Serve returns as soon as Shutdown starts; main waits for Shutdown
	// itself, or a request being answered would be cut off by the
	// process's exit.
	shutDown := make(chan struct{})
	go func() {
		defer close(shutDown)
		<-ctx.Done()
		fmt.Println("echoserver: signal received, shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			fmt.Printf("echoserver: shutdown: %v\n", err)
		}
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("echoserver: %v", err)
	}
	<-shutDown
}
