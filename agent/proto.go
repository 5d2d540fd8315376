package main

// Wire protocol (docs/agent-protocol.md). One byte stream over virtio-serial carries frames:
//
//	u32 BE length L (= 5 + payload length) | u8 type | u32 BE id | payload (L-5 bytes)
//
// A session starts when the host writes HostMagic; the agent answers with AgentMagic and
// frames follow in both directions. Bytes before a magic are discarded (resync after reconnect).

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

const (
	ProtocolVersion = 1
	AgentVersion    = "0.1.0"

	HostMagic  = "SBXHOST1\n"
	AgentMagic = "SBXAGENT1\n"

	HeaderLen  = 9
	MaxPayload = 1 << 20 // 1 MiB per frame, both directions
	MaxJSON    = 64 << 10

	TReq = 1 // host -> guest: JSON request, opens id
	TRes = 2 // guest -> host: JSON final response, closes id
	TEvt = 3 // guest -> host: JSON event for id
	TOut = 4 // guest -> host: bytes (stdout, file data, tcp data)
	TErr = 5 // guest -> host: bytes (stderr)
	TIn  = 6 // host -> guest: bytes (stdin, file data, tcp data); empty = EOF
	// THello opens a session without JSON: u64 BE host wall clock (ns) + seed bytes; answered by a TRes
	// like the JSON "hello" op. Agents without it answer EPROTO, and the host falls back to that op.
	THello = 7
	// TExec opens an exec without JSON (docs/agent-protocol.md, "EXEC frame"): the arguments of the "exec"
	// op in a fixed binary layout, answered like it. Offered as feature "exec.bin".
	TExec = 8
	// TWindow grants flow-control credit (docs/agent-protocol.md, "Flow control"): u32 BE bytes the sender will
	// take on stream id. Host -> guest for OUT/ERR, guest -> host for IN; from the host with id 0 (empty payload)
	// it turns flow control on for the session. Offered as feature "flow".
	TWindow = 9
)

var (
	errFrameTooLarge = errors.New("frame too large")
	// errNewSession: HostMagic arrived where a frame header was expected. The guest was restored from a
	// snapshot taken while a host was connected, and a new host is talking; no valid length starts with
	// these bytes ("SBXH" is over the limit), so this is unambiguous at a frame boundary.
	errNewSession = errors.New("new session")
)

type Frame struct {
	Type    byte
	ID      uint32
	Payload []byte
}

func encodeFrame(t byte, id uint32, payload []byte) []byte {
	b := make([]byte, HeaderLen+len(payload))
	putHeader(b, t, id, len(payload))
	copy(b[HeaderLen:], payload)
	return b
}

// putHeader fills b[:HeaderLen] for a frame whose payload of n bytes follows.
func putHeader(b []byte, t byte, id uint32, n int) {
	binary.BigEndian.PutUint32(b[0:4], uint32(5+n))
	b[4] = t
	binary.BigEndian.PutUint32(b[5:9], id)
}

// readFrame reads one frame. An oversized frame is skipped (its payload discarded) and reported
// with errFrameTooLarge plus its header, so the caller can answer it and keep the stream in sync.
func readFrame(r io.Reader) (Frame, error) {
	var h [HeaderLen]byte
	if _, err := io.ReadFull(r, h[:4]); err != nil {
		return Frame{}, err
	}
	if string(h[0:4]) == HostMagic[:4] {
		rest := make([]byte, len(HostMagic)-4)
		if _, err := io.ReadFull(r, rest); err != nil {
			return Frame{}, err
		}
		if string(rest) == HostMagic[4:] {
			return Frame{}, errNewSession
		}
	}
	l := binary.BigEndian.Uint32(h[0:4])
	if l < 5 {
		return Frame{}, errors.New("frame length below header size")
	}
	if _, err := io.ReadFull(r, h[4:9]); err != nil {
		return Frame{}, err
	}
	f := Frame{Type: h[4], ID: binary.BigEndian.Uint32(h[5:9])}
	n := int64(l) - 5
	if n > MaxPayload {
		if _, err := io.CopyN(io.Discard, r, n); err != nil {
			return f, err
		}
		return f, errFrameTooLarge
	}
	f.Payload = make([]byte, n)
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		return f, err
	}
	return f, nil
}

// Request is the union of all request arguments; each op reads the fields it needs.
type Request struct {
	Op string `json:"op"`
	// hello / time
	TimeUnixNs int64 `json:"timeUnixNs,omitempty"`
	// Seed is fresh host entropy (base64 in JSON): clones of one snapshot share RNG state until reseeded.
	Seed []byte `json:"seed,omitempty"`
	// exec
	Argv      []string          `json:"argv,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	Stdin     bool              `json:"stdin,omitempty"`
	Pty       *PtySize          `json:"pty,omitempty"`
	TimeoutMs int64             `json:"timeoutMs,omitempty"`
	UID       *int              `json:"uid,omitempty"`
	GID       *int              `json:"gid,omitempty"`
	// signal / resize / cancel
	Target uint32 `json:"target,omitempty"`
	Signal int    `json:"signal,omitempty"`
	Cols   int    `json:"cols,omitempty"`
	Rows   int    `json:"rows,omitempty"`
	// files
	Path      string `json:"path,omitempty"`
	To        string `json:"to,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	Append    bool   `json:"append,omitempty"`
	Parents   bool   `json:"parents,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	Offset    int64  `json:"offset,omitempty"`
	Length    int64  `json:"length,omitempty"`
	Depth     int    `json:"depth,omitempty"`
	// Metadata (file.write): the file's whole metadata once written (e2b's X-Metadata-* pairs); absent = untouched.
	Metadata map[string]string `json:"metadata,omitempty"`
	// AllowNetworkMounts (file.watch): watch a directory on a network filesystem (refused otherwise, as envd does).
	AllowNetworkMounts bool `json:"allowNetworkMounts,omitempty"`
	// tcp
	Host string `json:"host,omitempty"`
	Port int    `json:"port,omitempty"`
	// upstream.start (Path is the root dir, Host the listen host, Env the daemon's environment)
	GRPCPort int `json:"grpcPort,omitempty"`
	RESTPort int `json:"restPort,omitempty"`
}

type PtySize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

type opError struct {
	Code    string
	Message string
}

func (e *opError) Error() string { return e.Code + ": " + e.Message }

func newOpError(code, msg string) *opError { return &opError{Code: code, Message: msg} }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"ok": false, "code": "EINTERNAL", "message": err.Error()})
	}
	return b
}

// EXEC frame flags.
const (
	execStdin = 1 << iota
	execPty
	execUID
	execGID
)

// binReader reads the EXEC payload; the first read past the end sets err and every later read returns zero.
type binReader struct {
	b   []byte
	err error
}

func (r *binReader) take(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.err = errors.New("truncated exec frame")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *binReader) u8() byte {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *binReader) u16() int {
	if b := r.take(2); b != nil {
		return int(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (r *binReader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (r *binReader) str() string { return string(r.take(int(r.u32()))) }

func (r *binReader) strs() []string {
	n := r.u16()
	if n > len(r.b)/4 { // each string needs at least its length prefix
		r.err = errors.New("truncated exec frame")
		return nil
	}
	v := make([]string, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		v = append(v, r.str())
	}
	return v
}

// decodeExec parses an EXEC payload:
//
//	u8 flags | u32 timeoutMs | u32 uid | u32 gid | u16 cols | u16 rows | str cwd | u16 n, n x str argv | u16 n, n x str env ("K=V")
//
// where str is u32 BE length + bytes; uid, gid and the pty size count only with their flag.
func decodeExec(p []byte) (*Request, error) {
	r := &binReader{b: p}
	flags := r.u8()
	req := &Request{Op: "exec", TimeoutMs: int64(r.u32())}
	uid, gid := int(r.u32()), int(r.u32())
	cols, rows := r.u16(), r.u16()
	req.Cwd = r.str()
	req.Argv = r.strs()
	env := r.strs()
	if r.err == nil && len(r.b) > 0 {
		r.err = errors.New("trailing bytes after exec frame")
	}
	if r.err != nil {
		return nil, r.err
	}
	req.Stdin = flags&execStdin != 0
	if flags&execPty != 0 {
		req.Pty = &PtySize{Cols: cols, Rows: rows}
	}
	if flags&execUID != 0 {
		req.UID = &uid
	}
	if flags&execGID != 0 {
		req.GID = &gid
	}
	if len(env) > 0 {
		req.Env = make(map[string]string, len(env))
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			req.Env[k] = v
		}
	}
	return req, nil
}
