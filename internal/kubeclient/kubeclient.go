// Package kubeclient builds the API client configuration every herald
// component uses: a --kubeconfig file, else the in-cluster one.
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig loads kubeconfig, or the in-cluster configuration when it is
// empty; errors name the --kubeconfig flag.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
	}
	return rc, nil
}
