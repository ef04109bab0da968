//go:build k8s_pre_1_34

package main

import (
	"k8s.io/component-base/cli"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// Before v1.34 kubelet's command took no context, and kubectl had no
// kuberc to log about while its command is built (nor GetLogVerbosity).

func runKubelet() int { return cli.Run(kubelet.NewKubeletCommand()) }

func kubectlEarlyVerbosity() {}
