// Command kube-scheduler is the upstream scheduler, built from the
// k8s.io/kubernetes module for Kiln's local single-node cluster (see
// ../../../NODE.md): without it no Deployment's pod is placed on the node.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"kiln.dev/controlplane/lifeline"
)

func main() {
	lifeline.Follow()
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
