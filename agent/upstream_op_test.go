package main

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"sandbox-operator/agent/upstream/processv1"
)

func freeTCPPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// The op the host sends: both ports accept by the time it answers, processes are reaped through the agent's one
// reaper (as PID 1 it would race a second wait4), and a second call reports the running server.
func TestUpstreamStartOp(t *testing.T) {
	reaperOnce.Do(startReaper)
	root := filepath.Join(t.TempDir(), "workspace")
	req := &Request{Op: "upstream.start", Path: root, Host: "127.0.0.1", GRPCPort: freeTCPPort(t),
		RESTPort: freeTCPPort(t), Env: map[string]string{"SANDBOX_X": "1"}}
	res, err := startUpstream(req)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + res["rest"].(string) + "/v1/metadata")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metadata: %v %v", resp, err)
	}
	resp.Body.Close()
	conn, err := grpc.NewClient(res["grpc"].(string), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := processv1.NewProcessServiceClient(conn).Execute(ctx, &processv1.ExecuteRequest{
		Config: &processv1.ProcessConfig{Command: []string{"sh", "-c", "echo $SANDBOX_X; exit 4"}}})
	if err != nil || string(out.Stdout) != "1\n" || out.ExitCode != 4 {
		t.Fatalf("Execute: %v %v", out, err)
	}
	again, err := startUpstream(&Request{Op: "upstream.start", Path: "/elsewhere"})
	if err != nil || again["already"] != true || again["rest"] != res["rest"] {
		t.Fatalf("second start: %v %v", again, err)
	}
}
