// Command pause is the pod sandbox's first process on real nodes of the local platform: it holds the pod's
// namespaces open, reaps the zombies a shared PID namespace leaves to it, and exits 0 on SIGTERM or SIGINT so a
// pod stops at once. The local platform has no registry, so registry.k8s.io/pause is built from this source
// (src/cluster/node-images.ts), static (CGO_ENABLED=0), like upstream's C pause does the same three things.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is what `pause -v` prints (upstream's flag, which tools use to tell the image apart).
const version = "3.10.1-sbx"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause", version)
		return
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	// Written after Notify, so whoever waits for this line knows a TERM from now on is an exit 0.
	fmt.Fprintf(os.Stderr, "pause %s: running as PID %d\n", version, os.Getpid())
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: shutting down on %v\n", sig)
		os.Exit(0)
	}
}

// reap collects every exited child: signals coalesce, so one SIGCHLD may stand for several exits.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
