//go:build tools

// Package controlplane names the commands the tests build from their published Go modules:
// go.mod pins their versions, and nothing of their source is kept here.
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
