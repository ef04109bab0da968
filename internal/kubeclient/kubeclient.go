// Package kubeclient gives herald's user commands (status, migrate) the
// --kubeconfig and --context flags kubectl users expect, and the client
// configuration they select.
package kubeclient

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Flags select a cluster as kubectl does.
type Flags struct {
	Kubeconfig string
	Context    string
}

// Register adds --kubeconfig and --context to fs.
func (f *Flags) Register(fs *pflag.FlagSet) {
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
	fs.StringVar(&f.Context, "context", "", "kubeconfig context to use (default: the current context)")
}

// Config is the client configuration the flags select.
func (f Flags) Config() (*rest.Config, error) {
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	if f.Kubeconfig != "" {
		loading.ExplicitPath = f.Kubeconfig
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, &clientcmd.ConfigOverrides{CurrentContext: f.Context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no usable kubeconfig (--kubeconfig, --context, $KUBECONFIG, ~/.kube/config) and not in a cluster: %w", err)
	}
	return rc, nil
}
