package kubelet

import (
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/herald-lb/herald/e2e/lab/pki"
)

func TestServingCert(t *testing.T) {
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := Config{
		NodeName: "node1", NodeIP: netip.MustParseAddr("198.51.100.11"), NodeIPv6: netip.MustParseAddr("2001:db8:0:1::11"),
		TLSCertFile: filepath.Join(dir, "kubelet.crt"), TLSKeyFile: filepath.Join(dir, "kubelet.key"), ClientCAFile: filepath.Join(dir, "ca.crt"),
	}
	if err := WriteServingCert(cfg, ca); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(cfg.TLSCertFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if caPEM, _ := os.ReadFile(cfg.ClientCAFile); !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA in the client CA file")
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("no PEM in the certificate file")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	// The API server dials the InternalIP and verifies for it.
	for _, host := range []string{"198.51.100.11", "2001:db8:0:1::11", "node1"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: host, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("not valid for %s: %v", host, err)
		}
	}
	if err := cert.VerifyHostname("198.51.100.12"); err == nil {
		t.Error("valid for another node's address")
	}
	if cert.Subject.CommonName != "system:node:node1" || len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != "system:nodes" {
		t.Errorf("subject %s", cert.Subject)
	}
	if fi, err := os.Stat(cfg.TLSKeyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", fi.Mode(), err)
	}

	if _, err := ServingCert(Config{NodeName: "node1"}, ca); err == nil {
		t.Error("a certificate without the node's IP")
	}
	if err := WriteServingCert(Config{NodeName: "node1", NodeIP: cfg.NodeIP}, ca); err == nil {
		t.Error("no error without files")
	}
}
