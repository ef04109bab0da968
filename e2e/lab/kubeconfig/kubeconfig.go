// Package kubeconfig writes the lab's kubeconfig files: one cluster, one
// user (client certificate or bearer token), one context, credentials
// embedded so each file stands alone.
package kubeconfig

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Config is what goes into one kubeconfig.
type Config struct {
	// Server is the API server URL, e.g. https://127.0.0.1:6443.
	Server string
	// CAPEM is the CA bundle the server's certificate is checked against.
	CAPEM []byte
	// ClientCertPEM and ClientKeyPEM authenticate with a client certificate.
	ClientCertPEM, ClientKeyPEM []byte
	// Token authenticates with a bearer token instead.
	Token string
	// ClusterName, UserName and ContextName default to "herald-lab",
	// "user" and "herald-lab".
	ClusterName, UserName, ContextName string
	// Namespace is the context's default namespace (optional).
	Namespace string
}

func (c Config) api() *clientcmdapi.Config {
	cluster, user, ctx := c.ClusterName, c.UserName, c.ContextName
	if cluster == "" {
		cluster = "herald-lab"
	}
	if user == "" {
		user = "user"
	}
	if ctx == "" {
		ctx = "herald-lab"
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{
		Server:                   c.Server,
		CertificateAuthorityData: c.CAPEM,
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificateData: c.ClientCertPEM,
		ClientKeyData:         c.ClientKeyPEM,
		Token:                 c.Token,
	}
	cfg.Contexts[ctx] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: user, Namespace: c.Namespace}
	cfg.CurrentContext = ctx
	return cfg
}

// Write writes c to path (mode 0600, directories created).
func Write(path string, c Config) error {
	if c.Server == "" {
		return fmt.Errorf("kubeconfig %s: no server", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := clientcmd.Write(*c.api())
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// RESTConfig loads a kubeconfig file as a client-go REST config.
func RESTConfig(path string) (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", path)
}
