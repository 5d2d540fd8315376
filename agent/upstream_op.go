package main

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"sandbox-operator/agent/upstream"
)

// The one upstream sandboxd of this guest (docs/runtime-adapter.md "How upstream's SDKs reach a microVM"): started
// by the host's `upstream.start`, which it answers only once both ports accept, so the host reports the Pod Ready
// after the listeners exist. It survives host sessions (and snapshots) like any guest process.
var (
	upstreamMu  sync.Mutex
	upstreamSrv *upstream.Server
	upstreamRes map[string]any
)

func startUpstream(req *Request) (map[string]any, error) {
	upstreamMu.Lock()
	defer upstreamMu.Unlock()
	if upstreamSrv != nil {
		res := map[string]any{"already": true}
		for k, v := range upstreamRes {
			res[k] = v
		}
		return res, nil
	}
	if req.Path == "" || req.Path[0] != '/' {
		return nil, newOpError("EINVAL", "path (the root dir) must be absolute")
	}
	var cred *syscall.Credential
	if req.UID != nil || req.GID != nil {
		cred = &syscall.Credential{}
		if req.UID != nil {
			cred.Uid = uint32(*req.UID)
		}
		if req.GID != nil {
			cred.Gid = uint32(*req.GID)
		}
	}
	home := "/root"
	if cred != nil && cred.Uid != 0 {
		home = req.Path
	}
	// The daemon's environment: what a container's process would start with, the pod's env over it.
	envMap := map[string]string{"PATH": defaultPath, "HOME": home, "LANG": "C.UTF-8"}
	for k, v := range req.Env {
		envMap[k] = v
	}
	env := make([]string, 0, len(envMap))
	for k, v := range envMap {
		env = append(env, k+"="+v)
	}
	srv, err := upstream.Start(upstream.Config{RootDir: req.Path, ListenHost: req.Host, GRPCPort: req.GRPCPort,
		RESTPort: req.RESTPort, Env: env, Cred: cred, Spawn: upstreamSpawn})
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) && errno == syscall.EADDRINUSE {
			return nil, newOpError("EADDRINUSE", fmt.Sprintf("upstream sandboxd: %v", err))
		}
		return nil, newOpError("EIO", fmt.Sprintf("upstream sandboxd: %v", err))
	}
	grpcAddr, restAddr := srv.Addrs()
	upstreamSrv = srv
	upstreamRes = map[string]any{"grpc": grpcAddr, "rest": restAddr, "rootDir": req.Path}
	return upstreamRes, nil
}

// upstreamSpawn routes the child's status through the agent's one reaper (a second wait4 would race it).
func upstreamSpawn(argv0 string, argv []string, attr *syscall.ProcAttr) (int, <-chan syscall.WaitStatus, error) {
	pid, c, err := spawn(argv0, argv, attr)
	return pid, c, err
}
