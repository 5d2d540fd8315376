package upstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"syscall"
	"time"
)

// apiError is upstream's error body: {"code","message"}, both non-empty, always application/json.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

func errInvalid(msg string) *apiError {
	return &apiError{http.StatusBadRequest, "INVALID_ARGUMENT", msg}
}

// osError maps an OS error as upstream does: missing → 404, EACCES/EPERM or a root escape → 403, else 500 with
// the Go error text (Python and Go retry a 500, so it is kept for genuine faults).
func osError(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, errEscape):
		return &apiError{http.StatusForbidden, "PERMISSION_DENIED", errEscape.Error()}
	case errors.Is(err, os.ErrNotExist):
		return &apiError{http.StatusNotFound, "NOT_FOUND", "path does not exist within the sandbox"}
	case errors.Is(err, os.ErrPermission):
		return &apiError{http.StatusForbidden, "PERMISSION_DENIED", err.Error()}
	default:
		return &apiError{http.StatusInternalServerError, "INTERNAL", err.Error()}
	}
}

func writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := osError(err)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Length")
	w.WriteHeader(e.status)
	if r.Method != http.MethodHead {
		_ = json.NewEncoder(w).Encode(map[string]string{"code": e.code, "message": e.message})
	}
}

func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_ = json.NewEncoder(w).Encode(v)
	}
}

// routes uses the standard ServeMux as upstream does, so unknown paths (404 text), wrong methods (405 + Allow) and
// `..`/`//` redirects behave identically. A GET pattern also answers HEAD. {path...} is percent-decoded, %2F too.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/files/{path...}", s.getFile)
	mux.HandleFunc("PUT /v1/files/{path...}", s.putFile)
	mux.HandleFunc("DELETE /v1/files/{path...}", s.deleteFile)
	mux.HandleFunc("GET /v1/health", s.health)
	mux.HandleFunc("GET /v1/metadata", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, r, http.StatusOK, map[string]any{"env": s.metadata})
	})
	return mux
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if s.closing.Load() {
		writeError(w, r, &apiError{http.StatusServiceUnavailable, "UNAVAILABLE", "sandboxd is shutting down"})
		return
	}
	writeJSON(w, r, http.StatusOK, map[string]any{"status": "ok", "uptime_seconds": int64(time.Since(s.started) / time.Second)})
}

type dirEntry struct {
	Name       string `json:"name"`
	Size       int64  `json:"size"`
	Type       string `json:"type"`
	ModifiedAt string `json:"modified_at"`
	Mode       string `json:"mode"`
}

// statPath resolves a request's path inside the root and stats it; on failure it has answered the request.
func (s *Server) statPath(w http.ResponseWriter, r *http.Request, p string) (string, os.FileInfo, bool) {
	real, err := s.resolve(p)
	if err != nil {
		writeError(w, r, err)
		return "", nil, false
	}
	fi, err := os.Stat(real)
	if err != nil {
		writeError(w, r, err)
		return "", nil, false
	}
	return real, fi, true
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	p := r.PathValue("path")
	real, fi, ok := s.statPath(w, r, p)
	if !ok {
		return
	}
	if fi.IsDir() {
		s.list(w, r, p, real)
		return
	}
	f, err := os.Open(real)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	// ServeContent streams from the file and gives Range, If-Range and If-Modified-Since their meaning.
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// list is one level, sorted by name, symlinks followed; links that escape the root or dangle are left out.
func (s *Server) list(w http.ResponseWriter, r *http.Request, p, real string) {
	des, err := os.ReadDir(real)
	if err != nil {
		writeError(w, r, err)
		return
	}
	entries := make([]dirEntry, 0, len(des))
	for _, de := range des {
		full := filepath.Join(real, de.Name())
		if de.Type()&os.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(full)
			if err != nil || !s.within(target) {
				continue
			}
		}
		fi, err := os.Stat(full)
		if err != nil {
			continue
		}
		typ := "file"
		if fi.IsDir() {
			typ = "directory"
		}
		entries = append(entries, dirEntry{Name: de.Name(), Size: fi.Size(), Type: typ,
			ModifiedAt: fi.ModTime().UTC().Truncate(time.Second).Format(time.RFC3339),
			Mode:       fmt.Sprintf("%04o", uint32(fi.Mode().Perm()))})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	rel := s.rel(p)
	shown := "/"
	if rel != "." {
		shown = "/" + rel
	}
	writeJSON(w, r, http.StatusOK, map[string]any{"path": shown, "entries": entries})
}

var modeRE = regexp.MustCompile(`^0[0-7]{3}$`)

func (s *Server) putFile(w http.ResponseWriter, r *http.Request) {
	mode := os.FileMode(0o644)
	if q := r.URL.Query(); q.Has("mode") {
		m := q.Get("mode")
		if !modeRE.MatchString(m) {
			writeError(w, r, errInvalid("mode must be an octal string like 0644"))
			return
		}
		v, _ := strconv.ParseUint(m, 8, 32)
		mode = os.FileMode(v)
	}
	real, err := s.resolve(r.PathValue("path"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	if fi, err := os.Stat(real); err == nil && fi.IsDir() {
		writeError(w, r, errInvalid("target path is a directory"))
		return
	}
	body, err := uploadBody(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.writeAtomic(real, mode, body); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// uploadBody is the first multipart part named "file" for multipart/form-data, else the raw (maybe chunked) body.
func uploadBody(r *http.Request) (io.Reader, error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return r.Body, nil
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, errInvalid("invalid multipart body: " + err.Error())
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return nil, errInvalid("multipart body has no \"file\" part")
		}
		if err != nil {
			return nil, errInvalid("invalid multipart body: " + err.Error())
		}
		if part.FormName() == "file" {
			return part, nil
		}
	}
}

// writeAtomic writes into a temp file beside the target and renames it over: readers never see a torn file, and
// an overwrite replaces the inode (the old mode is not kept). Any failure removes the temp file.
func (s *Server) writeAtomic(real string, mode os.FileMode, body io.Reader) (err error) {
	dir := filepath.Dir(real)
	if err := s.mkdirAll(dir); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".sandboxd-tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(mode); err != nil {
		return err
	}
	if s.cfg.Cred != nil {
		if err = tmp.Chown(int(s.cfg.Cred.Uid), int(s.cfg.Cred.Gid)); err != nil {
			return err
		}
	}
	if _, err = io.Copy(tmp, body); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), real)
}

// mkdirAll creates missing parents 0755, owned by the process user so its processes can write there too.
func (s *Server) mkdirAll(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return &os.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil
	}
	if err := s.mkdirAll(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if s.cfg.Cred != nil {
		return os.Chown(dir, int(s.cfg.Cred.Uid), int(s.cfg.Cred.Gid))
	}
	return nil
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) {
	real, fi, ok := s.statPath(w, r, r.PathValue("path"))
	if !ok {
		return
	}
	var err error
	recursive := false
	if q := r.URL.Query(); q.Has("recursive") {
		recursive, err = strconv.ParseBool(q.Get("recursive"))
		if err != nil {
			writeError(w, r, errInvalid("recursive must be a boolean"))
			return
		}
	}
	conflict := &apiError{http.StatusConflict, "CONFLICT", "directory is not empty; pass recursive=true"}
	switch {
	case real == s.realRoot:
		// The root stays: recursive clears what is in it.
		if !recursive {
			writeError(w, r, conflict)
			return
		}
		des, err := os.ReadDir(real)
		if err != nil {
			writeError(w, r, err)
			return
		}
		for _, de := range des {
			if err := os.RemoveAll(filepath.Join(real, de.Name())); err != nil {
				writeError(w, r, err)
				return
			}
		}
	case fi.IsDir() && recursive:
		err = os.RemoveAll(real)
	default:
		err = os.Remove(real)
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			err = conflict
		}
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
