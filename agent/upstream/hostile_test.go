package upstream

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"

	"sandbox-operator/agent/upstream/processv1"
)

// Hostile input for upstream sandboxd's two listeners (test/hostile/README.md: every listener joins the day it is
// written). The tenant reaches both through port-forward, so everything is hostile: for every case the server must
// stay up, answer the next good request, and leave no goroutines behind.

// rawExchange writes b on a fresh connection and reads whatever comes back within d.
func rawExchange(t *testing.T, addr string, b []byte, d time.Duration) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(d))
	_, _ = c.Write(b)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	got, _ := io.ReadAll(c)
	return got
}

func (h *harness) stillGood(t *testing.T, what string) {
	t.Helper()
	res, b := h.do(t, "GET", "/v1/health", nil)
	if res.StatusCode != 200 {
		t.Fatalf("after %s: health %d %s", what, res.StatusCode, b)
	}
	r, err := h.client.Execute(ctxT(t), &processv1.ExecuteRequest{Config: cfg("echo", "ok")})
	if err != nil || string(r.Stdout) != "ok\n" {
		t.Fatalf("after %s: Execute %v %v", what, r, err)
	}
}

// settle waits for the goroutine count to come back near its baseline (connections closed, handlers returned).
func settle(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for runtime.NumGoroutine() > base+8 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("goroutines %d > baseline %d:\n%s", runtime.NumGoroutine(), base, buf[:n])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestHostileREST(t *testing.T) {
	h := start(t)
	_, rest := h.srv.Addrs()
	h.stillGood(t, "start")
	h.http.CloseIdleConnections()
	base := runtime.NumGoroutine()
	cases := []struct {
		name string
		raw  string
	}{
		{"garbage", "\x00\x01\x02\xff\r\n\r\n"},
		{"HTTP/0.9", "GET /\n"},
		{"no version", "GET /v1/health\r\n\r\n"},
		{"absolute-form target", "GET http://x/v1/files/ HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"double slashes", "GET //v1//files//etc HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"backslash", "GET /v1/files/..\\..\\etc\\passwd HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"NUL in path", "GET /v1/files/a%00b HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"bad percent", "GET /v1/files/%zz HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"encoded traversal", "GET /v1/files/%2E%2E%2F%2E%2E%2Fetc%2Fshadow HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"huge path", "GET /v1/files/" + strings.Repeat("a/", 40000) + " HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"long name", "PUT /v1/files/" + strings.Repeat("n", 300) + " HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx"},
		{"header flood", "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 2<<20) + "\r\n\r\n"},
		{"two content-lengths", "PUT /v1/files/cl HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"},
		{"bad chunk", "PUT /v1/files/ch HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n"},
		{"body cut short", "PUT /v1/files/short HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc"},
		{"chunked cut short", "PUT /v1/files/cshort HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc"},
		{"multipart without boundary", "PUT /v1/files/mp HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data\r\nContent-Length: 3\r\n\r\nabc"},
		{"multipart garbage", "PUT /v1/files/mp HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=zz\r\nContent-Length: 9\r\n\r\n--zz\r\nabc"},
		{"multipart bad part header", "PUT /v1/files/mp HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=zz\r\nContent-Length: 30\r\n\r\n--zz\r\nbad header\r\n\r\nx\r\n--zz--"},
		{"bad media type", "PUT /v1/files/mt HTTP/1.1\r\nHost: x\r\nContent-Type: ;;;===\r\nContent-Length: 1\r\n\r\nx"},
		{"mode junk", "PUT /v1/files/m?mode=%00%ff HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx"},
		{"query junk", "DELETE /v1/files/?recursive=%zz&recursive=1 HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"bad range", "GET /v1/health HTTP/1.1\r\nHost: x\r\nRange: bytes=99999999999999999999-\r\n\r\n"},
		{"pipelined flood", strings.Repeat("GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n", 500)},
		{"h2 preface on REST", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"},
	}
	for _, c := range cases {
		rawExchange(t, rest, []byte(c.raw), 5*time.Second)
		h.stillGood(t, c.name)
	}
	// A range past a real file's end is 416, and a Range list of thousands of parts is refused, not expanded.
	h.put(t, "/v1/files/r.txt", "0123456789")
	res, _ := h.do(t, "GET", "/v1/files/r.txt", nil, "Range", "bytes=100-200")
	if res.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("range past end: %d", res.StatusCode)
	}
	res, _ = h.do(t, "GET", "/v1/files/r.txt", nil, "Range", "bytes="+strings.Repeat("0-1,", 5000)+"0-1")
	if res.StatusCode >= 500 {
		t.Fatalf("range flood: %d", res.StatusCode)
	}
	// Seeded random request bytes.
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 200; i++ {
		b := make([]byte, rng.Intn(512))
		rng.Read(b)
		if i%2 == 0 {
			b = append([]byte("PUT /v1/files/"), b...)
		}
		rawExchange(t, rest, b, 2*time.Second)
	}
	h.stillGood(t, "random bytes")
	h.http.CloseIdleConnections()
	settle(t, base)
}

// grpcFrame is one length-prefixed gRPC message as it travels in DATA frames.
func grpcFrame(compressed byte, declared uint32, body []byte) []byte {
	b := make([]byte, 5, 5+len(body))
	b[0] = compressed
	binary.BigEndian.PutUint32(b[1:], declared)
	return append(b, body...)
}

// h2Call opens an h2c connection and sends one request to method with the given DATA payload, returning the
// grpc-status the server answered with ("" when the connection ended without one).
func h2Call(t *testing.T, addr, method string, data []byte, extra ...hpack.HeaderField) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	bw := bufio.NewWriter(c)
	bw.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(bw, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	_ = fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fields := append([]hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: method}, {Name: ":authority", Value: "x"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"}}, extra...)
	for _, f := range fields {
		_ = enc.WriteField(f)
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	for first := true; first || len(data) > 0; first = false {
		n := min(len(data), 16384)
		_ = fr.WriteData(1, n == len(data), data[:n])
		data = data[n:]
	}
	_ = bw.Flush()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return ""
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
				_ = bw.Flush()
			}
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "" && s != "200" {
				return "http " + s
			}
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" {
					return hf.Value
				}
			}
		case *http2.GoAwayFrame, *http2.RSTStreamFrame:
			return fmt.Sprintf("%T", f)
		}
	}
}

func TestHostileGRPC(t *testing.T) {
	h := start(t)
	grpcAddr, _ := h.srv.Addrs()
	h.stillGood(t, "start")
	base := runtime.NumGoroutine()
	// Not HTTP/2 at all.
	for _, raw := range []string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "\x00\x00\x00\x00", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + strings.Repeat("\xff", 4096)} {
		rawExchange(t, grpcAddr, []byte(raw), 5*time.Second)
		h.stillGood(t, fmt.Sprintf("raw %q", raw[:min(len(raw), 16)]))
	}
	execute := processv1.ProcessService_Execute_FullMethodName
	internal := fmt.Sprint(int(codes.Internal))
	cases := []struct {
		name   string
		method string
		data   []byte
		want   []string // acceptable grpc-status values (or frame types)
	}{
		{"protobuf garbage", execute, grpcFrame(0, 8, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), []string{internal}},
		{"length lies (short)", execute, grpcFrame(0, 100, []byte{1, 2}), []string{internal}},
		{"over the 4 MiB limit", execute, grpcFrame(0, 64<<20, []byte{1}), []string{fmt.Sprint(int(codes.ResourceExhausted))}},
		{"compressed without grpc-encoding", execute, grpcFrame(1, 1, []byte{0}), []string{internal}},
		{"unknown method", "/process.v1.ProcessService/Nope", grpcFrame(0, 0, nil), []string{fmt.Sprint(int(codes.Unimplemented))}},
		{"unknown service", "/x.Y/Z", grpcFrame(0, 0, nil), []string{fmt.Sprint(int(codes.Unimplemented))}},
		{"empty body", execute, nil, []string{internal}},
		{"Start garbage", processv1.ProcessService_Start_FullMethodName, grpcFrame(0, 3, []byte{0x0a, 0xff, 0x01}), []string{internal}},
	}
	for _, c := range cases {
		got := h2Call(t, grpcAddr, c.method, c.data)
		ok := false
		for _, w := range c.want {
			ok = ok || got == w
		}
		if !ok {
			t.Errorf("%s: got %q, want one of %v", c.name, got, c.want)
		}
		h.stillGood(t, c.name)
	}
	// Well-formed messages with hostile values.
	nul := "a\x00b"
	for _, r := range []*processv1.ExecuteRequest{
		{Config: &processv1.ProcessConfig{Command: []string{"echo", nul}}},
		{Config: &processv1.ProcessConfig{Command: []string{nul}}},
		{Config: &processv1.ProcessConfig{Command: []string{"echo"}, EnvVars: map[string]string{"A=B": "c", nul: "d", "": "e"}}},
		{Config: &processv1.ProcessConfig{Command: []string{"echo"}, Cwd: &nul}},
		{Config: &processv1.ProcessConfig{Command: []string{strings.Repeat("x", 1<<20)}}},
	} {
		_, _ = h.client.Execute(ctxT(t), r)
	}
	for _, sig := range []processv1.Signal{-1, 1 << 30, 3} {
		_, err := h.client.SendSignal(ctxT(t), &processv1.SendSignalRequest{ProcessId: -5, Signal: sig})
		if codeOf(err) != codes.InvalidArgument {
			t.Errorf("signal %d: %v", sig, err)
		}
	}
	stream, err := h.client.Start(ctxT(t), &processv1.StartRequest{Config: cfg("cat"), Pty: &processv1.PTY{Cols: 1 << 31, Rows: 70000}})
	if err != nil {
		t.Fatal(err)
	}
	id := initOf(t, stream)
	_, _ = h.client.ResizeTTY(ctxT(t), &processv1.ResizeTTYRequest{ProcessId: id, Cols: 1<<32 - 1, Rows: 0})
	_, _ = h.client.WriteStdin(ctxT(t), &processv1.WriteStdinRequest{ProcessId: id, Payload: &processv1.WriteStdinRequest_Eof{}})
	collectAfter(t, stream, id)
	h.stillGood(t, "hostile values")
	settle(t, base)
}
