package upstream

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// errEscape is a path that leaves the sandbox root, lexically or through a symlink: 403 PERMISSION_DENIED over
// REST, PERMISSION_DENIED for a process cwd (docs/runtime-adapter.md "How upstream's SDKs reach a microVM").
var errEscape = errors.New("path traversal outside sandbox root is forbidden")

// rel turns a request path (already percent-decoded, %2F included) into a clean path relative to the root: a
// leading "/" is ignored, and an absolute path that starts with the root itself has that prefix stripped. ".." is
// kept, so an escape stays visible to resolve.
func (s *Server) rel(p string) string {
	if p == s.root || strings.HasPrefix(p, s.root+"/") {
		p = strings.TrimPrefix(p, s.root)
	}
	p = strings.TrimLeft(p, "/")
	if p == "" {
		return "."
	}
	return filepath.Clean(p)
}

// resolve maps a request path to the host path it acts on: lexical clean, join with the root, then symlinks
// evaluated on the nearest existing ancestor (the rest appended), and the result must be the root or lie under it.
func (s *Server) resolve(p string) (string, error) {
	joined := filepath.Join(s.root, s.rel(p))
	real, err := evalExisting(joined)
	if err != nil {
		return "", err
	}
	if !s.within(real) {
		return "", errEscape
	}
	return real, nil
}

func (s *Server) within(p string) bool {
	return p == s.realRoot || strings.HasPrefix(p, s.realRoot+"/")
}

// evalExisting evaluates symlinks on the longest existing prefix of p and appends the part that does not exist.
func evalExisting(p string) (string, error) {
	var missing []string
	cur := p
	for {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			for i := len(missing) - 1; i >= 0; i-- {
				real = filepath.Join(real, missing[i])
			}
			return real, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p, nil
		}
		missing = append(missing, filepath.Base(cur))
		cur = parent
	}
}
