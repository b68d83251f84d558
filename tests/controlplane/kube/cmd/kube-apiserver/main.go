// Command kube-apiserver is the upstream API server, built from the
// k8s.io/kubernetes module for Kiln's local control plane.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"kiln.dev/controlplane/lifeline"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	lifeline.Follow()
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
