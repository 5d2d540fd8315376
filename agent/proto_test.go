package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var wire bytes.Buffer
	wire.Write(encodeFrame(TOut, 7, []byte("abc")))
	wire.Write(encodeFrame(TRes, 0xfffffff0, nil))
	for _, want := range []Frame{{Type: TOut, ID: 7, Payload: []byte("abc")}, {Type: TRes, ID: 0xfffffff0, Payload: []byte{}}} {
		got, err := readFrame(&wire)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	}
	if _, err := readFrame(&wire); err != io.EOF {
		t.Fatalf("at the end: %v, want EOF", err)
	}
}

func TestFrameHeader(t *testing.T) {
	b := encodeFrame(TWindow, 0x01020304, []byte{9, 9})
	want := []byte{0, 0, 0, 7, TWindow, 1, 2, 3, 4, 9, 9}
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded % x, want % x", b, want)
	}
}

// An oversized frame is skipped, reported with its header, and the next frame still reads.
func TestOversizedFrameKeepsStreamInSync(t *testing.T) {
	var wire bytes.Buffer
	h := make([]byte, HeaderLen)
	putHeader(h, TReq, 42, MaxPayload+1)
	wire.Write(h)
	wire.Write(make([]byte, MaxPayload+1))
	wire.Write(encodeFrame(TReq, 43, []byte(`{"op":"ping"}`)))
	f, err := readFrame(&wire)
	if !errors.Is(err, errFrameTooLarge) || f.ID != 42 || f.Type != TReq {
		t.Fatalf("got %+v, %v; want id 42 and errFrameTooLarge", f, err)
	}
	f, err = readFrame(&wire)
	if err != nil || f.ID != 43 || string(f.Payload) != `{"op":"ping"}` {
		t.Fatalf("next frame: %+v, %v", f, err)
	}
}

func TestHostMagicAtFrameBoundaryStartsNewSession(t *testing.T) {
	if _, err := readFrame(bytes.NewReader([]byte(HostMagic))); !errors.Is(err, errNewSession) {
		t.Fatalf("got %v, want errNewSession", err)
	}
	// "SBXH" not followed by the rest of the magic is a length over the limit: skipped, not a session.
	b := append([]byte("SBXHxxxxx"), make([]byte, 16)...)
	if _, err := readFrame(bytes.NewReader(b)); errors.Is(err, errNewSession) {
		t.Fatal("a partial magic started a session")
	}
}

func TestMalformedFrames(t *testing.T) {
	short := []byte{0, 0, 0, 4, TReq, 0, 0, 0, 1}
	if _, err := readFrame(bytes.NewReader(short)); err == nil {
		t.Fatal("a length below the header size was accepted")
	}
	truncated := encodeFrame(TIn, 1, []byte("hello"))[:HeaderLen+2]
	if _, err := readFrame(bytes.NewReader(truncated)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated payload: %v, want ErrUnexpectedEOF", err)
	}
}

// execPayload builds an EXEC frame payload the way the host does (src/guest/protocol.ts encodeExecPayload).
func execPayload(flags byte, timeoutMs, uid, gid uint32, cols, rows uint16, cwd string, argv, env []string) []byte {
	b := []byte{flags}
	b = binary.BigEndian.AppendUint32(b, timeoutMs)
	b = binary.BigEndian.AppendUint32(b, uid)
	b = binary.BigEndian.AppendUint32(b, gid)
	b = binary.BigEndian.AppendUint16(b, cols)
	b = binary.BigEndian.AppendUint16(b, rows)
	str := func(s string) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	str(cwd)
	b = binary.BigEndian.AppendUint16(b, uint16(len(argv)))
	for _, a := range argv {
		str(a)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(env)))
	for _, e := range env {
		str(e)
	}
	return b
}

func TestDecodeExec(t *testing.T) {
	p := execPayload(execStdin|execPty|execUID, 1500, 1000, 7, 100, 30, "/tmp", []string{"sh", "-c", "echo hi"}, []string{"A=b=c", "EMPTY="})
	req, err := decodeExec(p)
	if err != nil {
		t.Fatal(err)
	}
	uid := 1000
	want := &Request{Op: "exec", TimeoutMs: 1500, Cwd: "/tmp", Argv: []string{"sh", "-c", "echo hi"},
		Env: map[string]string{"A": "b=c", "EMPTY": ""}, Stdin: true, Pty: &PtySize{Cols: 100, Rows: 30}, UID: &uid}
	if !reflect.DeepEqual(req, want) {
		t.Fatalf("got %+v, want %+v", req, want)
	}
	// Without their flags, uid/gid and the pty size do not count.
	req, err = decodeExec(execPayload(0, 0, 5, 5, 80, 24, "", []string{"true"}, nil))
	if err != nil || req.UID != nil || req.GID != nil || req.Pty != nil || req.Stdin || req.Env != nil {
		t.Fatalf("got %+v, %v", req, err)
	}
}

func TestDecodeExecRejectsMalformedPayloads(t *testing.T) {
	good := execPayload(0, 0, 0, 0, 0, 0, "/", []string{"true"}, nil)
	cases := map[string][]byte{
		"empty":          {},
		"truncated":      good[:len(good)-1],
		"trailing bytes": append(append([]byte{}, good...), 0),
		// A count of strings that cannot fit in what is left: refused before allocating for it.
		"huge argv count": append(append([]byte{}, good[:21+1]...), 0xff, 0xff),
	}
	for name, p := range cases {
		if _, err := decodeExec(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
