package upstream

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"sandbox-operator/agent/upstream/processv1"
)

// Mirrors upstream's process unit tests (packages/sandboxd process tests), run over real gRPC.

func cfg(cmd ...string) *processv1.ProcessConfig { return &processv1.ProcessConfig{Command: cmd} }

func codeOf(err error) codes.Code { return status.Code(err) }

func TestExecuteEcho(t *testing.T) {
	h := start(t)
	res, err := h.client.Execute(ctxT(t), &processv1.ExecuteRequest{Config: cfg("echo", "hello")})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "hello\n" || len(res.Stderr) != 0 || res.ExitCode != 0 {
		t.Fatalf("got %+v", res)
	}
}

func TestExecuteExitCodeIsNoError(t *testing.T) {
	h := start(t)
	res, err := h.client.Execute(ctxT(t), &processv1.ExecuteRequest{Config: cfg("sh", "-c", "exit 3")})
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("got %+v, %v", res, err)
	}
}

func TestExecuteEnvAndCwd(t *testing.T) {
	h := start(t)
	if err := mkdir(h, "sub"); err != nil {
		t.Fatal(err)
	}
	sub := "sub"
	res, err := h.client.Execute(ctxT(t), &processv1.ExecuteRequest{Config: &processv1.ProcessConfig{
		Command: []string{"sh", "-c", "echo $GREETING; pwd"}, EnvVars: map[string]string{"GREETING": "hi"}, Cwd: &sub}})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	if len(lines) != 2 || lines[0] != "hi" || !strings.HasSuffix(lines[1], "/sub") {
		t.Fatalf("stdout %q", res.Stdout)
	}
	// Without cwd a process starts in the root.
	res, err = h.client.Execute(ctxT(t), &processv1.ExecuteRequest{Config: cfg("pwd")})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != h.root {
		t.Fatalf("pwd %q %v, root %s", res.GetStdout(), err, h.root)
	}
}

func TestExecuteRejects(t *testing.T) {
	h := start(t)
	if _, err := h.client.Execute(ctxT(t), &processv1.ExecuteRequest{Config: cfg()}); codeOf(err) != codes.InvalidArgument {
		t.Fatalf("empty command: %v", err)
	}
	if _, err := h.client.Execute(ctxT(t), &processv1.ExecuteRequest{}); codeOf(err) != codes.InvalidArgument {
		t.Fatalf("no config: %v", err)
	}
	up := "../.."
	_, err := h.client.Execute(ctxT(t), &processv1.ExecuteRequest{Config: &processv1.ProcessConfig{Command: []string{"pwd"}, Cwd: &up}})
	if codeOf(err) != codes.PermissionDenied {
		t.Fatalf("cwd escape: %v", err)
	}
	missing := "nope"
	_, err = h.client.Execute(ctxT(t), &processv1.ExecuteRequest{Config: &processv1.ProcessConfig{Command: []string{"pwd"}, Cwd: &missing}})
	if codeOf(err) != codes.NotFound {
		t.Fatalf("missing cwd: %v", err)
	}
	if _, err := h.client.Execute(ctxT(t), &processv1.ExecuteRequest{Config: cfg("no-such-binary-xyz")}); codeOf(err) != codes.NotFound {
		t.Fatalf("missing binary: %v", err)
	}
}

// startResult collects a Start stream, checking its framing: one init first, one exit last.
type startResult struct {
	pid            int32
	stdout, stderr bytes.Buffer
	exit           int32
}

func collect(t *testing.T, stream processv1.ProcessService_StartClient) *startResult {
	return collectAfter(t, stream, 0)
}

// collectAfter goes on from a stream whose init (id) was already read by initOf.
func collectAfter(t *testing.T, stream processv1.ProcessService_StartClient, id int32) *startResult {
	t.Helper()
	r := &startResult{pid: id}
	first, sawExit := id == 0, false
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if sawExit {
			t.Fatalf("event after exit: %v", ev)
		}
		switch e := ev.Event.(type) {
		case *processv1.StartResponse_Init:
			if !first || r.pid != 0 {
				t.Fatal("init not first")
			}
			r.pid = e.Init.ProcessId
		case *processv1.StartResponse_Stdout:
			r.stdout.Write(e.Stdout)
		case *processv1.StartResponse_Stderr:
			r.stderr.Write(e.Stderr)
		case *processv1.StartResponse_Exit:
			sawExit = true
			r.exit = e.Exit.ExitCode
		}
		if r.pid == 0 {
			t.Fatal("first event is not init")
		}
		first = false
	}
	if !sawExit {
		t.Fatal("stream ended without exit")
	}
	return r
}

// initOf reads the init event of a stream whose rest is collected later.
func initOf(t *testing.T, stream processv1.ProcessService_StartClient) int32 {
	t.Helper()
	ev, err := stream.Recv()
	if err != nil || ev.GetInit() == nil {
		t.Fatalf("first event %v, %v", ev, err)
	}
	return ev.GetInit().ProcessId
}

func TestStartFraming(t *testing.T) {
	h := start(t)
	stream, err := h.client.Start(ctxT(t), &processv1.StartRequest{Config: cfg("sh", "-c", "echo out; echo err 1>&2; exit 7")})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, stream)
	if r.pid <= 0 || r.stdout.String() != "out\n" || r.stderr.String() != "err\n" || r.exit != 7 {
		t.Fatalf("got pid %d stdout %q stderr %q exit %d", r.pid, r.stdout.String(), r.stderr.String(), r.exit)
	}
}

func TestStartFailureSendsNoEvent(t *testing.T) {
	h := start(t)
	stream, err := h.client.Start(ctxT(t), &processv1.StartRequest{Config: cfg("no-such-binary-xyz")})
	if err == nil {
		_, err = stream.Recv()
	}
	if codeOf(err) != codes.NotFound {
		t.Fatalf("got %v", err)
	}
}

func TestStdinPipedThrough(t *testing.T) {
	h := start(t)
	stream, err := h.client.Start(ctxT(t), &processv1.StartRequest{Config: cfg("cat")})
	if err != nil {
		t.Fatal(err)
	}
	id := initOf(t, stream)
	if _, err := h.client.WriteStdin(ctxT(t), &processv1.WriteStdinRequest{ProcessId: id,
		Payload: &processv1.WriteStdinRequest_Input{Input: []byte("piped-through")}}); err != nil {
		t.Fatal(err)
	}
	eof := &processv1.WriteStdinRequest{ProcessId: id, Payload: &processv1.WriteStdinRequest_Eof{}}
	if _, err := h.client.WriteStdin(ctxT(t), eof); err != nil {
		t.Fatal(err)
	}
	// A second eof is an error (the process may already be gone: then the id is unknown).
	if _, err := h.client.WriteStdin(ctxT(t), eof); codeOf(err) != codes.Internal && codeOf(err) != codes.NotFound {
		t.Fatalf("second eof: %v", err)
	}
	r := collectAfter(t, stream, id)
	if r.stdout.String() != "piped-through" || r.exit != 0 {
		t.Fatalf("stdout %q exit %d", r.stdout.String(), r.exit)
	}
}

func TestUnknownProcessIsNotFound(t *testing.T) {
	h := start(t)
	_, err := h.client.WriteStdin(ctxT(t), &processv1.WriteStdinRequest{ProcessId: 424242,
		Payload: &processv1.WriteStdinRequest_Input{Input: []byte("x")}})
	if codeOf(err) != codes.NotFound {
		t.Fatalf("WriteStdin: %v", err)
	}
	_, err = h.client.SendSignal(ctxT(t), &processv1.SendSignalRequest{ProcessId: 424242, Signal: processv1.Signal_SIGNAL_SIGTERM})
	if codeOf(err) != codes.NotFound {
		t.Fatalf("SendSignal: %v", err)
	}
	_, err = h.client.ResizeTTY(ctxT(t), &processv1.ResizeTTYRequest{ProcessId: 424242, Cols: 1, Rows: 1})
	if codeOf(err) != codes.NotFound {
		t.Fatalf("ResizeTTY: %v", err)
	}
}

func TestSignals(t *testing.T) {
	h := start(t)
	stream, err := h.client.Start(ctxT(t), &processv1.StartRequest{Config: cfg("sleep", "30")})
	if err != nil {
		t.Fatal(err)
	}
	id := initOf(t, stream)
	if _, err := h.client.SendSignal(ctxT(t), &processv1.SendSignalRequest{ProcessId: id}); codeOf(err) != codes.InvalidArgument {
		t.Fatalf("UNSPECIFIED: %v", err)
	}
	if _, err := h.client.SendSignal(ctxT(t), &processv1.SendSignalRequest{ProcessId: id, Signal: 3}); codeOf(err) != codes.InvalidArgument {
		t.Fatalf("SIGQUIT: %v", err)
	}
	if _, err := h.client.SendSignal(ctxT(t), &processv1.SendSignalRequest{ProcessId: id, Signal: processv1.Signal_SIGNAL_SIGKILL}); err != nil {
		t.Fatal(err)
	}
	if r := collectAfter(t, stream, id); r.exit != -1 {
		t.Fatalf("exit after KILL: %d (upstream's wire value is -1)", r.exit)
	}

	stream, err = h.client.Start(ctxT(t), &processv1.StartRequest{Config: cfg("sleep", "30")})
	if err != nil {
		t.Fatal(err)
	}
	id = initOf(t, stream)
	if _, err := h.client.SendSignal(ctxT(t), &processv1.SendSignalRequest{ProcessId: id, Signal: processv1.Signal_SIGNAL_SIGTERM}); err != nil {
		t.Fatal(err)
	}
	if r := collectAfter(t, stream, id); r.exit == 0 {
		t.Fatal("exit 0 after TERM")
	}
	// The id leaves the registry once its stream has ended.
	if _, err := h.client.SendSignal(ctxT(t), &processv1.SendSignalRequest{ProcessId: id, Signal: processv1.Signal_SIGNAL_SIGTERM}); codeOf(err) != codes.NotFound {
		t.Fatalf("after exit: %v", err)
	}
}

func TestSignalReachesTheGroup(t *testing.T) {
	h := start(t)
	// The shell's child sleeps; TERM to the group ends both, so the stream ends long before 30 s.
	stream, err := h.client.Start(ctxT(t), &processv1.StartRequest{Config: cfg("sh", "-c", "sleep 30; echo late")})
	if err != nil {
		t.Fatal(err)
	}
	id := initOf(t, stream)
	began := time.Now()
	// TERM, not INT: a test run from a background shell inherits SIGINT ignored, and exec keeps that.
	if _, err := h.client.SendSignal(ctxT(t), &processv1.SendSignalRequest{ProcessId: id, Signal: processv1.Signal_SIGNAL_SIGTERM}); err != nil {
		t.Fatal(err)
	}
	r := collectAfter(t, stream, id)
	if r.exit == 0 || strings.Contains(r.stdout.String(), "late") || time.Since(began) > 4*time.Second {
		t.Fatalf("exit %d stdout %q after %s", r.exit, r.stdout.String(), time.Since(began))
	}
}

func TestResizeWithoutPty(t *testing.T) {
	h := start(t)
	stream, err := h.client.Start(ctxT(t), &processv1.StartRequest{Config: cfg("sleep", "30")})
	if err != nil {
		t.Fatal(err)
	}
	id := initOf(t, stream)
	if _, err := h.client.ResizeTTY(ctxT(t), &processv1.ResizeTTYRequest{ProcessId: id, Cols: 80, Rows: 24}); codeOf(err) != codes.FailedPrecondition {
		t.Fatalf("got %v", err)
	}
	_, _ = h.client.SendSignal(ctxT(t), &processv1.SendSignalRequest{ProcessId: id, Signal: processv1.Signal_SIGNAL_SIGKILL})
	collectAfter(t, stream, id)
}

func TestPtySizeAndResize(t *testing.T) {
	h := start(t)
	stream, err := h.client.Start(ctxT(t), &processv1.StartRequest{Config: cfg("sh", "-c", "stty size"),
		Pty: &processv1.PTY{Cols: 80, Rows: 24}})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, stream)
	if !strings.Contains(r.stdout.String(), "24 80") || r.stderr.Len() != 0 || r.exit != 0 {
		t.Fatalf("stdout %q stderr %q exit %d", r.stdout.String(), r.stderr.String(), r.exit)
	}

	stream, err = h.client.Start(ctxT(t), &processv1.StartRequest{Config: cfg("sh", "-c", "read x; stty size"),
		Pty: &processv1.PTY{Cols: 80, Rows: 24}})
	if err != nil {
		t.Fatal(err)
	}
	id := initOf(t, stream)
	if _, err := h.client.ResizeTTY(ctxT(t), &processv1.ResizeTTYRequest{ProcessId: id, Cols: 120, Rows: 40}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.WriteStdin(ctxT(t), &processv1.WriteStdinRequest{ProcessId: id,
		Payload: &processv1.WriteStdinRequest_Input{Input: []byte("go\n")}}); err != nil {
		t.Fatal(err)
	}
	if r := collectAfter(t, stream, id); !strings.Contains(r.stdout.String(), "40 120") {
		t.Fatalf("after resize: %q", r.stdout.String())
	}
}

func TestBackgroundGrandchildDoesNotHoldTheExit(t *testing.T) {
	h := start(t)
	began := time.Now()
	res, err := h.client.Execute(ctxT(t), &processv1.ExecuteRequest{Config: cfg("sh", "-c", "echo a; sleep 60 & echo b")})
	if err != nil || res.ExitCode != 0 || !strings.HasPrefix(string(res.Stdout), "a\n") {
		t.Fatalf("%+v %v", res, err)
	}
	if d := time.Since(began); d > executeWaitDelay+5*time.Second {
		t.Fatalf("Execute took %s", d)
	}
}

func TestShutdownEndsStreamsWithNonZeroExit(t *testing.T) {
	h := start(t)
	stream, err := h.client.Start(ctxT(t), &processv1.StartRequest{Config: cfg("sleep", "300")})
	if err != nil {
		t.Fatal(err)
	}
	id := initOf(t, stream)
	done := make(chan struct{})
	go func() {
		ctx, cancel := contextWithTimeout(10 * time.Second)
		defer cancel()
		h.srv.Shutdown(ctx)
		close(done)
	}()
	if r := collectAfter(t, stream, id); r.exit == 0 {
		t.Fatal("exit 0")
	}
	<-done
}

// A client that fills the stdin of a process that never reads it can still kill that process: the blocked write
// holds no lock SendSignal needs, and it fails once the process is gone.
func TestBlockedStdinDoesNotBlockSignals(t *testing.T) {
	h := start(t)
	stream, err := h.client.Start(ctxT(t), &processv1.StartRequest{Config: cfg("sleep", "30")})
	if err != nil {
		t.Fatal(err)
	}
	id := initOf(t, stream)
	wrote := make(chan error, 1)
	go func() {
		_, err := h.client.WriteStdin(ctxT(t), &processv1.WriteStdinRequest{ProcessId: id,
			Payload: &processv1.WriteStdinRequest_Input{Input: bytes.Repeat([]byte("x"), 1<<20)}})
		wrote <- err
	}()
	time.Sleep(300 * time.Millisecond) // let the write fill the pipe
	began := time.Now()
	if _, err := h.client.SendSignal(ctxT(t), &processv1.SendSignalRequest{ProcessId: id, Signal: processv1.Signal_SIGNAL_SIGKILL}); err != nil {
		t.Fatal(err)
	}
	if r := collectAfter(t, stream, id); r.exit != -1 || time.Since(began) > 10*time.Second {
		t.Fatalf("exit %d after %s", r.exit, time.Since(began))
	}
	if err := <-wrote; codeOf(err) != codes.Internal {
		t.Fatalf("the blocked write: %v", err)
	}
}

// Server reflection is registered, as upstream's (grpcurl -plaintext works without the .proto), and serves the
// file under upstream's name.
func TestReflection(t *testing.T) {
	h := start(t)
	ga, _ := h.srv.Addrs()
	conn, err := grpc.NewClient(ga, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	res, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range res.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, "process.v1.ProcessService") {
		t.Fatalf("services %v", names)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{
		FileContainingSymbol: "process.v1.ProcessService"}}); err != nil {
		t.Fatal(err)
	}
	res, err = stream.Recv()
	if err != nil || len(res.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("file: %v %v", res, err)
	}
	var fd descriptorpb.FileDescriptorProto
	if err := proto.Unmarshal(res.GetFileDescriptorResponse().GetFileDescriptorProto()[0], &fd); err != nil ||
		fd.GetName() != "process/v1/process.proto" || fd.GetPackage() != "process.v1" {
		t.Fatalf("descriptor %q %q %v", fd.GetName(), fd.GetPackage(), err)
	}
}
