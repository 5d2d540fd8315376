package upstream

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"sandbox-operator/agent/upstream/processv1"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type harness struct {
	srv    *Server
	root   string
	base   string // http://127.0.0.1:port
	client processv1.ProcessServiceClient
	http   *http.Client
}

// start runs a real server on loopback ports with a fresh root, as upstream's unit tests do with httptest/bufconn.
func start(t *testing.T, env ...string) *harness {
	t.Helper()
	root := filepath.Join(t.TempDir(), "workspace")
	srv, err := Start(Config{RootDir: root, ListenHost: "127.0.0.1", GRPCPort: freePort(t), RESTPort: freePort(t),
		Env: append([]string{"PATH=" + os.Getenv("PATH")}, env...)})
	if err != nil {
		t.Fatal(err)
	}
	ga, ra := srv.Addrs()
	conn, err := grpc.NewClient(ga, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return &harness{srv: srv, root: srv.realRoot, base: "http://" + ra, client: processv1.NewProcessServiceClient(conn),
		http: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func mkdir(h *harness, rel string) error { return os.MkdirAll(filepath.Join(h.root, rel), 0o755) }
