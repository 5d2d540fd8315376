// Package upstream serves upstream agent-sandbox's in-pod data plane ("upstream sandboxd", not this project's node
// daemon of the same name) from inside a microVM: the gRPC process.v1.ProcessService (h2c, reflection registered)
// and the REST file API, with upstream's semantics, so upstream's SDKs work against a sandbox unchanged. The agent
// starts it on the host's `upstream.start` op. See docs/runtime-adapter.md "How upstream's SDKs reach a microVM".
package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"

	"sandbox-operator/agent/upstream/processv1"
)

// Spawner starts a process and delivers its wait status once. The agent runs as PID 1 with one reaper that waits
// for every child, so it must hand in its own spawn (a second wait4 would race the reaper); tests use forkWait.
type Spawner func(argv0 string, argv []string, attr *syscall.ProcAttr) (pid int, wait <-chan syscall.WaitStatus, err error)

// Config mirrors upstream's flags, plus what the guest decides that upstream's image fixes (the user).
type Config struct {
	RootDir    string // --root-dir; created 0755 (owned by Cred) if missing
	ListenHost string // --listen-host
	GRPCPort   int    // --grpc-port
	RESTPort   int    // --rest-port
	EnvPrefix  string // --metadata-env-prefix
	ChunkSize  int    // --stream-chunk-size; 0 means 4096
	// Env is the daemon's environment: what processes inherit (env_vars override) and /v1/metadata filters.
	Env []string
	// Cred, when set, is the user processes run as and the owner of what PUT creates (upstream's image runs as 1000).
	Cred  *syscall.Credential
	Spawn Spawner
}

// Server is one running upstream sandboxd: both listeners accept from the moment Start returns.
type Server struct {
	cfg      Config
	root     string
	realRoot string
	env      []string
	metadata map[string]string
	started  time.Time
	closing  atomic.Bool
	procs    *registry
	grpc     *grpc.Server
	http     *http.Server
	grpcLn   net.Listener
	restLn   net.Listener
	wg       sync.WaitGroup
}

// Start creates the root, binds both ports and serves. Listen errors are returned, so a caller that awaits Start
// knows the ports accept (the SDKs never probe before their first request).
func Start(cfg Config) (*Server, error) {
	if cfg.RootDir == "" {
		cfg.RootDir = "/workspace"
	}
	if cfg.ListenHost == "" {
		cfg.ListenHost = "0.0.0.0"
	}
	if cfg.GRPCPort == 0 {
		cfg.GRPCPort = 9090
	}
	if cfg.RESTPort == 0 {
		cfg.RESTPort = 8080
	}
	if cfg.GRPCPort == cfg.RESTPort {
		return nil, errors.New("grpc and rest ports must differ")
	}
	if cfg.EnvPrefix == "" {
		cfg.EnvPrefix = "SANDBOX_"
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 4096
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	if cfg.Spawn == nil {
		cfg.Spawn = forkWait
	}
	root, err := filepath.Abs(cfg.RootDir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(root); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, fmt.Errorf("root dir: %w", err)
		}
		if cfg.Cred != nil {
			if err := os.Chown(root, int(cfg.Cred.Uid), int(cfg.Cred.Gid)); err != nil {
				return nil, fmt.Errorf("root dir: %w", err)
			}
		}
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("root dir: %w", err)
	}
	s := &Server{cfg: cfg, root: root, realRoot: realRoot, env: cfg.Env, started: time.Now(), procs: newRegistry()}
	s.metadata = filterMetadata(cfg.Env, cfg.EnvPrefix)

	s.grpcLn, err = net.Listen("tcp", net.JoinHostPort(cfg.ListenHost, strconv.Itoa(cfg.GRPCPort)))
	if err != nil {
		return nil, err
	}
	s.restLn, err = net.Listen("tcp", net.JoinHostPort(cfg.ListenHost, strconv.Itoa(cfg.RESTPort)))
	if err != nil {
		s.grpcLn.Close()
		return nil, err
	}
	// grpc-go's defaults, as upstream's grpc.NewServer(): a 4 MiB receive limit guards the decoder.
	s.grpc = grpc.NewServer()
	processv1.RegisterProcessServiceServer(s.grpc, &processService{s: s})
	reflection.Register(s.grpc)
	s.http = &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second,
		MaxHeaderBytes: 1 << 20}
	s.wg.Add(2)
	go func() { defer s.wg.Done(); _ = s.grpc.Serve(s.grpcLn) }()
	go func() { defer s.wg.Done(); _ = s.http.Serve(s.restLn) }()
	return s, nil
}

// Addrs are the bound addresses (tests listen on port 0... through explicit free ports).
func (s *Server) Addrs() (grpcAddr, restAddr string) {
	return s.grpcLn.Addr().String(), s.restLn.Addr().String()
}

// Shutdown as upstream on SIGTERM: health turns 503 first, managed processes get SIGTERM, 2 s later SIGKILL (which
// ends their Start streams with an exit), then HTTP and gRPC stop, all within ctx.
func (s *Server) Shutdown(ctx context.Context) {
	s.closing.Store(true)
	s.procs.signalAll(syscall.SIGTERM)
	select {
	case <-s.procs.empty():
	case <-time.After(2 * time.Second):
		s.procs.signalAll(syscall.SIGKILL)
	case <-ctx.Done():
	}
	_ = s.http.Shutdown(ctx)
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.grpc.Stop()
	}
	s.wg.Wait()
}

// secretish names are never published by /v1/metadata, whatever the prefix.
var secretish = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CRED", "KEY", "AUTH", "BEARER", "PRIVATE", "CERT"}

func filterMetadata(env []string, prefix string) map[string]string {
	out := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, prefix) {
			continue
		}
		up := strings.ToUpper(k)
		secret := false
		for _, w := range secretish {
			if strings.Contains(up, w) {
				secret = true
				break
			}
		}
		if !secret {
			out[k] = v
		}
	}
	return out
}

// forkWait is the Spawner outside PID 1: fork, then wait for that one pid.
func forkWait(argv0 string, argv []string, attr *syscall.ProcAttr) (int, <-chan syscall.WaitStatus, error) {
	pid, err := syscall.ForkExec(argv0, argv, attr)
	if err != nil {
		return 0, nil, err
	}
	c := make(chan syscall.WaitStatus, 1)
	go func() {
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(pid, &ws, 0, nil)
			if err != syscall.EINTR {
				break
			}
		}
		c <- ws
	}()
	return pid, c, nil
}
