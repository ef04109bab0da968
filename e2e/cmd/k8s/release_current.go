//go:build !k8s_pre_1_34

package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// The calls whose signatures differ between the releases the lab builds
// (k8sbin.ReleaseTags); release_pre134.go has them for releases before
// v1.34.

func runKubelet() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) }

// kubectlEarlyVerbosity honours -v before kubectl's command is built, as
// upstream kubectl does, so that plugin and kuberc handling during
// construction can log.
func kubectlEarlyVerbosity() {
	_, _ = logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args))
}
