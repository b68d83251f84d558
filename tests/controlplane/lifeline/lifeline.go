// Package lifeline ends a control-plane process when the process that started
// it goes away, so that a test run killed with SIGKILL (which no Rust Drop
// survives) still leaves no etcd or kube-apiserver behind.
//
// It is opt-in through the KILN_LIFELINE environment variable, which holds the
// PID of the parent to follow; `make cluster-up` starts detached processes
// without it.
package lifeline

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// Follow starts watching the parent named by KILN_LIFELINE, if any, and exits
// the process once its parent PID changes (the parent died and the process was
// re-parented).
func Follow() {
	raw := os.Getenv("KILN_LIFELINE")
	if raw == "" {
		return
	}
	parent, err := strconv.Atoi(raw)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lifeline: KILN_LIFELINE=%q is not a PID\n", raw)
		os.Exit(2)
	}
	go func() {
		for {
			if os.Getppid() != parent {
				fmt.Fprintf(os.Stderr, "lifeline: parent %d is gone, exiting\n", parent)
				os.Exit(1)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}()
}
