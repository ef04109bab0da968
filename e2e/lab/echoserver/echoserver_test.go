package echoserver

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestPageOverRealTCP(t *testing.T) {
	srv := httptest.NewServer(Handler{})
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/some/path?x=1&y=2", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", "lab-test")
	req.Header.Set("X-Custom", "v")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	page := string(body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, want := range []string{
		"CLIENT VALUES:\n",
		"client_address=127.0.0.1\n",
		"command=POST\n",
		"real path=/some/path?x=1&y=2\n",
		"query=x=1&y=2\n",
		"request_version=1.1\n",
		"request_uri=http://127.0.0.1:" + port + "/some/path?x=1&y=2\n",
		"\nSERVER VALUES:\nserver_version=",
		"\nHEADERS RECEIVED:\n",
		"host=127.0.0.1:" + port + "\n",
		"user-agent=lab-test\n",
		"x-custom=v\n",
		"BODY:\nhello",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	// Headers are sorted, like the Lua handler sorts them.
	if strings.Index(page, "host=") > strings.Index(page, "user-agent=") {
		t.Errorf("headers not sorted:\n%s", page)
	}
}

func TestPageWithoutQueryOrBody(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "http://Example.COM:8080/", nil)
	r.RemoteAddr = "[::ffff:198.18.1.2]:40000"
	page := Handler{ServerPort: 8080}.Page(r)
	for _, want := range []string{
		"client_address=198.18.1.2\n",
		"query=nil\n",
		"request_uri=http://example.com:8080/\n",
		"BODY:\n-no body in request-",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
}

func TestClientAddress(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.11:1234":       "192.0.2.11",
		"[2001:db8::1]:80":      "2001:db8::1",
		"[::ffff:192.0.2.1]:80": "192.0.2.1",
		"garbage":               "garbage",
	} {
		if got := clientAddress(in); got != want {
			t.Errorf("clientAddress(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestServeUDP(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ServeUDP(pc, "pod-a") }()
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 256)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(buf[:n]), "hostname=pod-a client_address=127.0.0.1\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	pc.Close()
	if err := <-done; err != nil {
		t.Errorf("ServeUDP after close: %v", err)
	}
}
