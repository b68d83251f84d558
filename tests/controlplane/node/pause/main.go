// Command pause is the pod sandbox ("pause") process of Kiln's local node:
// it holds the pod's namespaces and sleeps until SIGTERM or SIGINT. Nothing can
// be pulled from a registry here, so this stands in for registry.k8s.io/pause
// and is packed into an OCI image with umoci (see ../../NODE.md).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
	os.Exit(0)
}
