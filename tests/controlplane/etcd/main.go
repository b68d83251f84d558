// Command etcd is the upstream etcd server, built from go.etcd.io/etcd/server/v3
// in its own module so that its dependencies never meet the API server's.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"kiln.dev/controlplane/lifeline"
)

func main() {
	lifeline.Follow()
	etcdmain.Main(os.Args)
}
