package pki

import (
	"crypto/x509"
	"net"
	"testing"
)

func TestIssueAndLoad(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := ca.Write(dir, "ca"); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := loaded.Issue(CertSpec{CommonName: "srv", DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("192.0.2.254")}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pair.Cert.Verify(x509.VerifyOptions{DNSName: "192.0.2.254", Roots: ca.CertPool()}); err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue(CertSpec{CommonName: "admin", Organizations: []string{"system:masters"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Cert.Verify(x509.VerifyOptions{Roots: ca.CertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
	if client.Cert.Subject.Organization[0] != "system:masters" {
		t.Errorf("organization %v", client.Cert.Subject.Organization)
	}
	if _, err := client.TLSCertificate(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := WriteServiceAccountKeys(dir, "sa"); err != nil {
		t.Fatal(err)
	}
}
