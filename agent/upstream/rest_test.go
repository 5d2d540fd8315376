package upstream

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Mirrors upstream's filesystem and health/metadata unit tests, over a real HTTP listener.

func (h *harness) do(t *testing.T, method, path string, body io.Reader, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, h.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := h.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

func (h *harness) put(t *testing.T, path, body string) *http.Response {
	t.Helper()
	res, b := h.do(t, "PUT", path, strings.NewReader(body), "Content-Type", "application/octet-stream")
	if res.StatusCode != http.StatusNoContent || len(b) != 0 {
		t.Fatalf("PUT %s: %d %q", path, res.StatusCode, b)
	}
	return res
}

// wantError checks upstream's error JSON: status, code, and a non-empty message.
func wantError(t *testing.T, res *http.Response, b []byte, status int, code string) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("status %d, want %d (%s)", res.StatusCode, status, b)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error content type %q", ct)
	}
	var e struct{ Code, Message string }
	if err := json.Unmarshal(b, &e); err != nil || e.Code != code || e.Message == "" {
		t.Fatalf("error body %q (want code %s)", b, code)
	}
}

func TestPutGetRoundTrip(t *testing.T) {
	h := start(t)
	h.put(t, "/v1/files/notes/hello.txt", "hello from e2e")
	res, b := h.do(t, "GET", "/v1/files/notes/hello.txt", nil)
	if res.StatusCode != 200 || string(b) != "hello from e2e" || res.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("%d %q %q", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	// As the SDKs encode it: the whole path one segment, / as %2F.
	res, b = h.do(t, "GET", "/v1/files/notes%2Fhello.txt", nil)
	if res.StatusCode != 200 || string(b) != "hello from e2e" {
		t.Fatalf("%%2F: %d %q", res.StatusCode, b)
	}
	if fi, err := os.Stat(filepath.Join(h.root, "notes")); err != nil || !fi.IsDir() {
		t.Fatal("parent not created")
	}
	// Range requests are served (ServeContent).
	res, b = h.do(t, "GET", "/v1/files/notes/hello.txt", nil, "Range", "bytes=0-4")
	if res.StatusCode != 206 || string(b) != "hello" {
		t.Fatalf("range: %d %q", res.StatusCode, b)
	}
}

func TestPutModeAndValidation(t *testing.T) {
	h := start(t)
	h.put(t, "/v1/files/run.sh?mode=0755", "#!/bin/sh\n")
	if fi, _ := os.Stat(filepath.Join(h.root, "run.sh")); fi == nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v", fi)
	}
	h.put(t, "/v1/files/plain.txt", "x")
	if fi, _ := os.Stat(filepath.Join(h.root, "plain.txt")); fi == nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("default mode %v", fi)
	}
	for _, m := range []string{"0999", "777", "abcd", "01777"} {
		res, b := h.do(t, "PUT", "/v1/files/bad.txt?mode="+m, strings.NewReader("x"))
		wantError(t, res, b, 400, "INVALID_ARGUMENT")
	}
	if _, err := os.Stat(filepath.Join(h.root, "bad.txt")); err == nil {
		t.Fatal("a rejected PUT wrote the file")
	}
}

func TestPutOverwriteLeavesNoTempFiles(t *testing.T) {
	h := start(t)
	h.put(t, "/v1/files/f.txt", "one")
	h.put(t, "/v1/files/f.txt", "two")
	des, _ := os.ReadDir(h.root)
	if len(des) != 1 || des[0].Name() != "f.txt" {
		t.Fatalf("entries %v", des)
	}
	if b, _ := os.ReadFile(filepath.Join(h.root, "f.txt")); string(b) != "two" {
		t.Fatalf("content %q", b)
	}
}

func TestPutMultipart(t *testing.T) {
	h := start(t)
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	other, _ := mw.CreateFormField("note")
	other.Write([]byte("skip me"))
	fw, _ := mw.CreateFormFile("file", "ignored-name.bin")
	fw.Write([]byte("multipart content"))
	mw.Close()
	res, b := h.do(t, "PUT", "/v1/files/up.bin", &buf, "Content-Type", mw.FormDataContentType())
	if res.StatusCode != 204 {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
	if got, _ := os.ReadFile(filepath.Join(h.root, "up.bin")); string(got) != "multipart content" {
		t.Fatalf("content %q", got)
	}
	buf.Reset()
	mw = multipart.NewWriter(&buf)
	other, _ = mw.CreateFormField("note")
	other.Write([]byte("no file"))
	mw.Close()
	res, b = h.do(t, "PUT", "/v1/files/none.bin", &buf, "Content-Type", mw.FormDataContentType())
	wantError(t, res, b, 400, "INVALID_ARGUMENT")
}

func TestPutChunkedBody(t *testing.T) {
	h := start(t)
	// An io.Reader of unknown length makes net/http send chunked, as Python streams file objects.
	r, w := io.Pipe()
	go func() { w.Write([]byte("part1-")); w.Write([]byte("part2")); w.Close() }()
	res, b := h.do(t, "PUT", "/v1/files/chunked.txt", r)
	if res.StatusCode != 204 {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
	if got, _ := os.ReadFile(filepath.Join(h.root, "chunked.txt")); string(got) != "part1-part2" {
		t.Fatalf("content %q", got)
	}
}

func TestPutOntoDirectoryAndNested(t *testing.T) {
	h := start(t)
	mkdir(h, "d")
	res, b := h.do(t, "PUT", "/v1/files/d", strings.NewReader("x"))
	wantError(t, res, b, 400, "INVALID_ARGUMENT")
	h.put(t, "/v1/files/dir%2Fsub%2Ffile.txt", "nested")
	if got, _ := os.ReadFile(filepath.Join(h.root, "dir/sub/file.txt")); string(got) != "nested" {
		t.Fatalf("nested %q", got)
	}
	// A parent component that is a file: a genuine fault, 500.
	res, b = h.do(t, "PUT", "/v1/files/dir%2Fsub%2Ffile.txt%2Fx", strings.NewReader("x"))
	wantError(t, res, b, 500, "INTERNAL")
}

type listing struct {
	Path    string `json:"path"`
	Entries []struct {
		Name       string `json:"name"`
		Size       int64  `json:"size"`
		Type       string `json:"type"`
		ModifiedAt string `json:"modified_at"`
		Mode       string `json:"mode"`
	} `json:"entries"`
}

func TestListing(t *testing.T) {
	h := start(t)
	os.WriteFile(filepath.Join(h.root, "b.txt"), []byte("hi"), 0o600)
	os.Chmod(filepath.Join(h.root, "b.txt"), 0o600)
	mkdir(h, "adir")
	os.Symlink("/etc", filepath.Join(h.root, "escape"))
	os.Symlink("nowhere", filepath.Join(h.root, "broken"))
	os.Symlink("b.txt", filepath.Join(h.root, "c-link"))
	res, b := h.do(t, "GET", "/v1/files/", nil)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" || !bytes.HasSuffix(b, []byte("\n")) {
		t.Fatalf("%d %q %q", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	var l listing
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	if l.Path != "/" || len(l.Entries) != 3 {
		t.Fatalf("listing %s", b)
	}
	a, f, link := l.Entries[0], l.Entries[1], l.Entries[2]
	if a.Name != "adir" || a.Type != "directory" || f.Name != "b.txt" || f.Type != "file" || f.Size != 2 || f.Mode != "0600" {
		t.Fatalf("entries %s", b)
	}
	if link.Name != "c-link" || link.Type != "file" || link.Size != 2 {
		t.Fatalf("in-root symlink %s", b)
	}
	if ts, err := time.Parse(time.RFC3339, f.ModifiedAt); err != nil || !strings.HasSuffix(f.ModifiedAt, "Z") || ts.Nanosecond() != 0 {
		t.Fatalf("modified_at %q", f.ModifiedAt)
	}
	// An empty directory lists as "entries":[] (never null); path is the request's, with a leading "/".
	res, b = h.do(t, "GET", "/v1/files/adir", nil)
	if res.StatusCode != 200 || !bytes.Contains(b, []byte(`"entries":[]`)) || !bytes.Contains(b, []byte(`"path":"/adir"`)) {
		t.Fatalf("empty listing %s", b)
	}
	for _, root := range []string{"/v1/files/%2F", "/v1/files/%2E", "/v1/files/" + url.PathEscape(h.srv.root)} {
		if res, b := h.do(t, "GET", root, nil); res.StatusCode != 200 || !bytes.Contains(b, []byte(`"path":"/"`)) {
			t.Fatalf("%s: %d %s", root, res.StatusCode, b)
		}
	}
}

func TestMissingAndHead(t *testing.T) {
	h := start(t)
	res, b := h.do(t, "GET", "/v1/files/missing.txt", nil)
	wantError(t, res, b, 404, "NOT_FOUND")
	h.put(t, "/v1/files/here.txt", "abc")
	res, b = h.do(t, "HEAD", "/v1/files/here.txt", nil)
	if res.StatusCode != 200 || len(b) != 0 || res.Header.Get("Content-Length") != "3" {
		t.Fatalf("HEAD %d %q %v", res.StatusCode, b, res.Header)
	}
	res, b = h.do(t, "HEAD", "/v1/files/missing.txt", nil)
	if res.StatusCode != 404 || len(b) != 0 || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("HEAD missing %d %q", res.StatusCode, b)
	}
	res, _ = h.do(t, "HEAD", "/v1/files/", nil)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("HEAD dir %d", res.StatusCode)
	}
}

func TestTraversalIsForbidden(t *testing.T) {
	h := start(t)
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		res, b := h.do(t, m, "/v1/files/%2E%2E/%2E%2E/etc/passwd", strings.NewReader("x"))
		wantError(t, res, b, 403, "PERMISSION_DENIED")
		res, b = h.do(t, m, "/v1/files/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", strings.NewReader("x"))
		wantError(t, res, b, 403, "PERMISSION_DENIED")
	}
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644)
	os.Symlink(outside, filepath.Join(h.root, "link"))
	for _, p := range []string{"/v1/files/link/secret", "/v1/files/link", "/v1/files/link/new.txt"} {
		res, b := h.do(t, "GET", p, nil)
		wantError(t, res, b, 403, "PERMISSION_DENIED")
		res, b = h.do(t, "PUT", p, strings.NewReader("x"))
		wantError(t, res, b, 403, "PERMISSION_DENIED")
	}
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
		t.Fatal("a PUT through an escaping symlink wrote outside the root")
	}
	// A literal .. is the ServeMux's redirect (301 or, from Go 1.26, 307; the SDKs refuse redirects), never a file.
	res, _ := h.do(t, "GET", "/v1/files/a/../../etc/passwd", nil)
	if res.StatusCode != http.StatusMovedPermanently && res.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("literal ..: %d", res.StatusCode)
	}
}

func TestDelete(t *testing.T) {
	h := start(t)
	h.put(t, "/v1/files/gone.txt", "x")
	if res, _ := h.do(t, "DELETE", "/v1/files/gone.txt", nil); res.StatusCode != 204 {
		t.Fatalf("delete %d", res.StatusCode)
	}
	res, b := h.do(t, "GET", "/v1/files/gone.txt", nil)
	wantError(t, res, b, 404, "NOT_FOUND")
	res, b = h.do(t, "DELETE", "/v1/files/gone.txt?recursive=banana", nil)
	wantError(t, res, b, 404, "NOT_FOUND") // existence is checked before recursive is parsed

	h.put(t, "/v1/files/d/inner.txt", "x")
	res, b = h.do(t, "DELETE", "/v1/files/d", nil)
	wantError(t, res, b, 409, "CONFLICT")
	res, b = h.do(t, "DELETE", "/v1/files/d?recursive=banana", nil)
	wantError(t, res, b, 400, "INVALID_ARGUMENT")
	if res, _ := h.do(t, "DELETE", "/v1/files/d?recursive=true", nil); res.StatusCode != 204 {
		t.Fatalf("recursive %d", res.StatusCode)
	}
	mkdir(h, "empty")
	if res, _ := h.do(t, "DELETE", "/v1/files/empty", nil); res.StatusCode != 204 {
		t.Fatalf("empty dir %d", res.StatusCode)
	}

	h.put(t, "/v1/files/x/y.txt", "x")
	res, b = h.do(t, "DELETE", "/v1/files/", nil)
	wantError(t, res, b, 409, "CONFLICT")
	if res, _ := h.do(t, "DELETE", "/v1/files/?recursive=true", nil); res.StatusCode != 204 {
		t.Fatalf("root recursive %d", res.StatusCode)
	}
	if des, err := os.ReadDir(h.root); err != nil || len(des) != 0 {
		t.Fatalf("root after clear: %v %v", des, err)
	}
}

func TestMuxErrors(t *testing.T) {
	h := start(t)
	res, b := h.do(t, "GET", "/v2/nothing", nil)
	if res.StatusCode != 404 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("unknown route %d %q", res.StatusCode, b)
	}
	res, _ = h.do(t, "POST", "/v1/files/x", nil)
	if res.StatusCode != 405 || res.Header.Get("Allow") == "" {
		t.Fatalf("POST %d %v", res.StatusCode, res.Header)
	}
}

func TestHealthAndMetadata(t *testing.T) {
	h := start(t, "SANDBOX_NAME=demo", "SANDBOX_API_TOKEN=x", "SANDBOX_db_password=y", "OTHER=z", "SANDBOX_PrivateThing=q")
	res, b := h.do(t, "GET", "/v1/health", nil)
	var health struct {
		Status        string `json:"status"`
		UptimeSeconds *int64 `json:"uptime_seconds"`
	}
	if res.StatusCode != 200 || json.Unmarshal(b, &health) != nil || health.Status != "ok" || health.UptimeSeconds == nil || *health.UptimeSeconds < 0 {
		t.Fatalf("health %d %s", res.StatusCode, b)
	}
	res, b = h.do(t, "GET", "/v1/metadata", nil)
	var md struct{ Env map[string]string }
	if res.StatusCode != 200 || json.Unmarshal(b, &md) != nil || len(md.Env) != 1 || md.Env["SANDBOX_NAME"] != "demo" {
		t.Fatalf("metadata %d %s", res.StatusCode, b)
	}
	h.srv.closing.Store(true)
	res, b = h.do(t, "GET", "/v1/health", nil)
	wantError(t, res, b, 503, "UNAVAILABLE")
	h.srv.closing.Store(false)
}

func TestEmptyMetadataIsAnObject(t *testing.T) {
	h := start(t)
	if _, b := h.do(t, "GET", "/v1/metadata", nil); strings.TrimSpace(string(b)) != `{"env":{}}` {
		t.Fatalf("metadata %s", b)
	}
}
