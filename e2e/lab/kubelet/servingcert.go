package kubelet

import (
	"errors"
	"net"
	"os"

	"github.com/herald-lb/herald/e2e/lab/pki"
)

// ServingCert signs the kubelet API's serving certificate for the node
// with the cluster CA: the subject a real kubelet's serving certificate
// request has (CN=system:node:<name>, O=system:nodes), the node's
// InternalIPs as IP SANs and its name as the DNS SAN, so an API server
// started with --kubelet-certificate-authority and
// --kubelet-preferred-address-types=InternalIP verifies it.
func ServingCert(cfg Config, ca *pki.CA) (*pki.Pair, error) {
	if cfg.NodeName == "" || !cfg.NodeIP.IsValid() {
		return nil, errors.New("kubelet: a serving certificate needs the node's name and IP")
	}
	ips := []net.IP{net.IP(cfg.NodeIP.AsSlice())}
	if cfg.NodeIPv6.IsValid() {
		ips = append(ips, net.IP(cfg.NodeIPv6.AsSlice()))
	}
	return ca.Issue(pki.CertSpec{
		CommonName:    NodeUser(cfg.NodeName),
		Organizations: []string{"system:nodes"},
		DNSNames:      []string{cfg.NodeName},
		IPs:           ips,
		Server:        true,
	})
}

// WriteServingCert writes ServingCert's pair to cfg.TLSCertFile and
// cfg.TLSKeyFile (0600), and the CA to cfg.ClientCAFile: the lab's API
// server presents a client certificate of the same CA.
func WriteServingCert(cfg Config, ca *pki.CA) error {
	if cfg.TLSCertFile == "" || cfg.TLSKeyFile == "" || cfg.ClientCAFile == "" {
		return errors.New("kubelet: no file for the serving certificate, its key or the client CA")
	}
	pair, err := ServingCert(cfg, ca)
	if err != nil {
		return err
	}
	if err := os.WriteFile(cfg.TLSCertFile, pair.CertPEM, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(cfg.TLSKeyFile, pair.KeyPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(cfg.ClientCAFile, ca.CertPEM, 0o644)
}
