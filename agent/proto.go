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
	// tcp
	Host string `json:"host,omitempty"`
	Port int    `json:"port,omitempty"`
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
