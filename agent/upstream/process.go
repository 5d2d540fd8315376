package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"sandbox-operator/agent/upstream/processv1"
)

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Upstream's bounds on output after the child exits, when a background grandchild keeps a pipe open: Execute's
// exec.Cmd WaitDelay, and Start's drain wait.
const (
	executeWaitDelay = 10 * time.Second
	startDrainDelay  = 5 * time.Second
)

type processService struct {
	processv1.UnimplementedProcessServiceServer
	s *Server
}

// proc is one Start process while its handler runs.
type proc struct {
	pid int
	// writeMu serialises stdin writes. It is not mu: a write into a full pipe blocks until the process reads or
	// exits, and SendSignal must still get through to end it.
	writeMu sync.Mutex
	mu      sync.Mutex // guards eof and exited
	stdin   *os.File   // the pipe's write end, or the pty master
	eof     bool
	pty     *os.File
	exited  bool
}

type registry struct {
	mu    sync.Mutex
	next  int32
	procs map[int32]*proc
	idle  chan struct{} // closed while procs is empty
}

func newRegistry() *registry {
	r := &registry{procs: map[int32]*proc{}, idle: make(chan struct{})}
	close(r.idle)
	return r
}

// add gives p the next virtual id (counted from 1 per daemon lifetime, never an OS pid).
func (r *registry) add(p *proc) int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	if len(r.procs) == 0 {
		r.idle = make(chan struct{})
	}
	r.procs[r.next] = p
	return r.next
}

func (r *registry) remove(id int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.procs, id)
	if len(r.procs) == 0 {
		close(r.idle)
	}
}

func (r *registry) get(id int32) (*proc, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.procs[id]; ok {
		return p, nil
	}
	return nil, status.Errorf(codes.NotFound, "process %d not found", id)
}

func (r *registry) empty() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.idle
}

func (r *registry) signalAll(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		_ = killGroup(p.pid, sig)
	}
}

// killGroup signals the process group (each child leads its own), falling back to the single pid.
func killGroup(pid int, sig syscall.Signal) error {
	if err := syscall.Kill(-pid, sig); err != nil {
		return syscall.Kill(pid, sig)
	}
	return nil
}

// prepared is a validated ProcessConfig: binary, argv, environment and directory.
type prepared struct {
	bin  string
	argv []string
	env  []string
	dir  string
}

func (s *Server) prepare(cfg *processv1.ProcessConfig) (*prepared, error) {
	if cfg == nil || len(cfg.GetCommand()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "command is required")
	}
	dir := s.realRoot
	if cfg.Cwd != nil && cfg.GetCwd() != "" {
		real, err := s.resolve(cfg.GetCwd())
		if errors.Is(err, errEscape) {
			return nil, status.Errorf(codes.PermissionDenied, "cwd: %v", err)
		}
		if err != nil {
			return nil, status.Errorf(codes.Internal, "cwd: %v", err)
		}
		dir = real
	}
	// The daemon's environment, env_vars overriding it; the binary is looked up on the daemon's PATH, as
	// exec.Command does upstream.
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, kv := range s.env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			set(k, v)
		}
	}
	daemonPath, ok := env["PATH"]
	if !ok {
		daemonPath = defaultPath
	}
	for k, v := range cfg.GetEnvVars() {
		set(k, v)
	}
	list := make([]string, 0, len(order))
	for _, k := range order {
		list = append(list, k+"="+env[k])
	}
	bin, err := lookPath(cfg.GetCommand()[0], daemonPath)
	if err != nil {
		return nil, err
	}
	return &prepared{bin: bin, argv: cfg.GetCommand(), env: list, dir: dir}, nil
}

func lookPath(name, path string) (string, error) {
	if p, ok := FindExecutable(name, path); ok {
		return p, nil
	}
	return "", status.Errorf(codes.NotFound, "exec: %q: executable file not found in $PATH", name)
}

// FindExecutable resolves name as a shell would against path (a list of directories): a name with a slash is taken
// as it is, else the first regular, executable file of that name. The agent's own exec uses it too (exec.go), each
// wrapping a miss in its protocol's error.
func FindExecutable(name, path string) (string, bool) {
	if strings.Contains(name, "/") {
		return name, true
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

// startError maps a fork/exec failure: missing binary or cwd → NOT_FOUND, permission → PERMISSION_DENIED.
func startError(err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return status.Errorf(codes.NotFound, "start process: %v", err)
	case errors.Is(err, os.ErrPermission):
		return status.Errorf(codes.PermissionDenied, "start process: %v", err)
	default:
		return status.Errorf(codes.Internal, "start process: %v", err)
	}
}

// exitCode is upstream's wire value: the exit status, or -1 when a signal ended the process (Go's ExitCode()).
func exitCode(ws syscall.WaitStatus) int32 {
	if ws.Exited() {
		return int32(ws.ExitStatus())
	}
	return -1
}

func (s *Server) sysAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: s.cfg.Cred}
}

// spawnPiped starts p with stdin from in and stdout/stderr into new pipes, returning the read ends.
func (s *Server) spawnPiped(p *prepared, in *os.File) (pid int, wait <-chan syscall.WaitStatus, outR, errR *os.File, err error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return 0, nil, nil, nil, status.Errorf(codes.Internal, "pipe: %v", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return 0, nil, nil, nil, status.Errorf(codes.Internal, "pipe: %v", err)
	}
	pid, wait, err = s.cfg.Spawn(p.bin, p.argv, &syscall.ProcAttr{Dir: p.dir, Env: p.env,
		Files: []uintptr{in.Fd(), outW.Fd(), errW.Fd()}, Sys: s.sysAttr()})
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return 0, nil, nil, nil, startError(err)
	}
	return pid, wait, outR, errR, nil
}

// Execute runs to completion with stdin at /dev/null and answers with all output; a non-zero exit is no error.
func (ps *processService) Execute(ctx context.Context, req *processv1.ExecuteRequest) (*processv1.ExecuteResponse, error) {
	s := ps.s
	p, err := s.prepare(req.GetConfig())
	if err != nil {
		return nil, err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "open %s: %v", os.DevNull, err)
	}
	pid, wait, outR, errR, err := s.spawnPiped(p, devnull)
	devnull.Close()
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = io.Copy(&stdout, outR) }()
	go func() { defer wg.Done(); _, _ = io.Copy(&stderr, errR) }()
	var ws syscall.WaitStatus
	select {
	case ws = <-wait:
	case <-ctx.Done():
		// As exec.CommandContext: the leader is killed when the RPC ends.
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-wait
		outR.Close()
		errR.Close()
		wg.Wait()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	drain(&wg, executeWaitDelay, outR, errR)
	return &processv1.ExecuteResponse{ExitCode: exitCode(ws), Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}, nil
}

// drain waits for the output readers, at most d after the exit (a background grandchild may hold the pipes), then
// closes the read ends so they stop.
func drain(wg *sync.WaitGroup, d time.Duration, files ...*os.File) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
	for _, f := range files {
		f.Close()
	}
	<-done
}

// Start streams init, then output, then exactly one exit, last. The id is registered before init is sent, so
// WriteStdin/SendSignal/ResizeTTY work as soon as the client has it.
func (ps *processService) Start(req *processv1.StartRequest, stream processv1.ProcessService_StartServer) error {
	s := ps.s
	p, err := s.prepare(req.GetConfig())
	if err != nil {
		return err
	}
	pr := &proc{}
	var pid int
	var wait <-chan syscall.WaitStatus
	var readers []*os.File
	if req.Pty != nil {
		master, slave, err := openPty()
		if err != nil {
			return status.Errorf(codes.Internal, "pty: %v", err)
		}
		if c, r := req.Pty.GetCols(), req.Pty.GetRows(); c > 0 && r > 0 {
			_ = setWinsize(master, c, r)
		}
		pid, wait, err = s.cfg.Spawn(p.bin, p.argv, &syscall.ProcAttr{Dir: p.dir, Env: p.env,
			Files: []uintptr{slave.Fd(), slave.Fd(), slave.Fd()},
			Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Credential: s.cfg.Cred}})
		slave.Close()
		if err != nil {
			master.Close()
			return startError(err)
		}
		pr.stdin, pr.pty = master, master
		readers = []*os.File{master}
	} else {
		inR, inW, err := os.Pipe()
		if err != nil {
			return status.Errorf(codes.Internal, "pipe: %v", err)
		}
		var outR, errR *os.File
		pid, wait, outR, errR, err = s.spawnPiped(p, inR)
		inR.Close()
		if err != nil {
			inW.Close()
			return err
		}
		pr.stdin = inW
		readers = []*os.File{outR, errR}
	}
	pr.pid = pid
	id := s.procs.add(pr)
	defer s.procs.remove(id)
	defer func() {
		pr.mu.Lock()
		if !pr.eof {
			pr.stdin.Close()
		}
		pr.eof = true
		pr.mu.Unlock()
	}()

	var sendMu sync.Mutex
	send := func(r *processv1.StartResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(r)
	}
	if err := send(&processv1.StartResponse{Event: &processv1.StartResponse_Init{Init: &processv1.InitEvent{ProcessId: id}}}); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-wait
		for _, f := range readers {
			f.Close()
		}
		return status.Errorf(codes.Internal, "send init: %v", err)
	}
	var wg sync.WaitGroup
	for i, f := range readers {
		wg.Add(1)
		go func(f *os.File, stderr bool) {
			defer wg.Done()
			buf := make([]byte, s.cfg.ChunkSize)
			for {
				n, err := f.Read(buf)
				if n > 0 {
					chunk := append([]byte(nil), buf[:n]...)
					ev := &processv1.StartResponse{Event: &processv1.StartResponse_Stdout{Stdout: chunk}}
					if stderr {
						ev = &processv1.StartResponse{Event: &processv1.StartResponse_Stderr{Stderr: chunk}}
					}
					_ = send(ev)
				}
				if err != nil {
					return
				}
			}
		}(f, i == 1)
	}
	var ws syscall.WaitStatus
	select {
	case ws = <-wait:
	case <-stream.Context().Done():
		_ = syscall.Kill(pid, syscall.SIGKILL)
		ws = <-wait
	}
	pr.mu.Lock()
	pr.exited = true
	pr.mu.Unlock()
	drain(&wg, startDrainDelay, readers...)
	if err := send(&processv1.StartResponse{Event: &processv1.StartResponse_Exit{Exit: &processv1.ExitEvent{ExitCode: exitCode(ws)}}}); err != nil {
		return status.FromContextError(stream.Context().Err()).Err()
	}
	return nil
}

func (ps *processService) WriteStdin(_ context.Context, req *processv1.WriteStdinRequest) (*processv1.WriteStdinResponse, error) {
	pr, err := ps.s.procs.get(req.GetProcessId())
	if err != nil {
		return nil, err
	}
	if pr.stdin == nil {
		return nil, status.Error(codes.FailedPrecondition, "process has no stdin")
	}
	switch payload := req.GetPayload().(type) {
	case *processv1.WriteStdinRequest_Eof:
		pr.mu.Lock()
		already := pr.eof
		pr.eof = true
		pr.mu.Unlock()
		if already {
			return nil, status.Error(codes.Internal, "stdin already closed")
		}
		// A write blocked in a full pipe fails with "file already closed" once this closes it.
		if err := pr.stdin.Close(); err != nil {
			return nil, status.Errorf(codes.Internal, "close stdin: %v", err)
		}
	case *processv1.WriteStdinRequest_Input:
		if len(payload.Input) == 0 {
			break
		}
		pr.writeMu.Lock()
		defer pr.writeMu.Unlock()
		pr.mu.Lock()
		closed := pr.eof
		pr.mu.Unlock()
		if closed {
			return nil, status.Error(codes.Internal, "stdin already closed")
		}
		if _, err := pr.stdin.Write(payload.Input); err != nil {
			return nil, status.Errorf(codes.Internal, "write stdin: %v", err)
		}
	}
	return &processv1.WriteStdinResponse{}, nil
}

func (ps *processService) SendSignal(_ context.Context, req *processv1.SendSignalRequest) (*processv1.SendSignalResponse, error) {
	var sig syscall.Signal
	switch req.GetSignal() {
	case processv1.Signal_SIGNAL_SIGINT:
		sig = syscall.SIGINT
	case processv1.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	case processv1.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	default:
		return nil, status.Errorf(codes.InvalidArgument, "unsupported signal %d", int32(req.GetSignal()))
	}
	pr, err := ps.s.procs.get(req.GetProcessId())
	if err != nil {
		return nil, err
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.exited {
		return &processv1.SendSignalResponse{}, nil
	}
	if err := killGroup(pr.pid, sig); err != nil {
		return nil, status.Errorf(codes.Internal, "signal: %v", err)
	}
	return &processv1.SendSignalResponse{}, nil
}

func (ps *processService) ResizeTTY(_ context.Context, req *processv1.ResizeTTYRequest) (*processv1.ResizeTTYResponse, error) {
	pr, err := ps.s.procs.get(req.GetProcessId())
	if err != nil {
		return nil, err
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.pty == nil || pr.exited {
		return nil, status.Error(codes.FailedPrecondition, "process has no pty")
	}
	if err := setWinsize(pr.pty, req.GetCols(), req.GetRows()); err != nil {
		return nil, status.Errorf(codes.Internal, "resize: %v", err)
	}
	return &processv1.ResizeTTYResponse{}, nil
}
