package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const maxListEntries = 10000

// maxListBytes keeps a listing's answer within one frame (MaxPayload): past it the listing is truncated, as past
// maxListEntries (metadata can make an entry 4 KiB larger).
const maxListBytes = MaxPayload - 64<<10

// entryBytes is about what an entry takes in the answer's JSON (its fields and names, path twice, pairs quoted).
func entryBytes(e map[string]any) int {
	n := 128 + 2*len(e["path"].(string))
	if t, ok := e["target"].(string); ok {
		n += len(t)
	}
	if meta, ok := e["metadata"].(map[string]string); ok {
		for k, v := range meta {
			n += len(k) + len(v) + 6
		}
	}
	return n
}

func checkPath(p string) error {
	if p == "" || !filepath.IsAbs(p) {
		return newOpError("EINVAL", fmt.Sprintf("path must be absolute: %q", p))
	}
	return nil
}

func fileType(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "dir"
	case m&os.ModeSymlink != 0:
		return "symlink"
	case m.IsRegular():
		return "file"
	default:
		return "other"
	}
}

func statInfo(p string, fi os.FileInfo) map[string]any {
	m := map[string]any{"path": p, "name": fi.Name(), "type": fileType(fi.Mode()), "size": fi.Size(),
		"mode": uint32(fi.Mode().Perm()), "mtimeMs": fi.ModTime().UnixMilli()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		m["uid"], m["gid"] = st.Uid, st.Gid
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		if t, err := os.Readlink(p); err == nil {
			m["target"] = t
		}
	}
	if meta := readMetadata(p); meta != nil {
		m["metadata"] = meta
	}
	return m
}

func fileStat(p string) (map[string]any, error) {
	if err := checkPath(p); err != nil {
		return nil, err
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	return statInfo(p, fi), nil
}

func fileList(p string, depth int) (map[string]any, error) {
	if err := checkPath(p); err != nil {
		return nil, err
	}
	if depth <= 0 {
		depth = 1
	}
	entries := []map[string]any{}
	truncated := false
	size := 0
	var walk func(dir string, d int) error
	walk = func(dir string, d int) error {
		des, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, de := range des {
			if len(entries) >= maxListEntries || size >= maxListBytes {
				truncated = true
				return nil
			}
			full := filepath.Join(dir, de.Name())
			fi, err := de.Info()
			if err != nil {
				continue
			}
			e := statInfo(full, fi)
			size += entryBytes(e)
			entries = append(entries, e)
			if de.IsDir() && d < depth {
				_ = walk(full, d+1)
			}
		}
		return nil
	}
	if err := walk(p, 1); err != nil {
		return nil, err
	}
	return map[string]any{"entries": entries, "truncated": truncated}, nil
}

func fileMkdir(p string, parents bool, mode uint32, uid, gid *int) error {
	if err := checkPath(p); err != nil {
		return err
	}
	if mode == 0 {
		mode = 0o755
	}
	var err error
	if parents {
		err = mkdirAllOwned(p, os.FileMode(mode), uid, gid)
	} else {
		err = os.Mkdir(p, os.FileMode(mode))
	}
	if err != nil {
		return err
	}
	return chownFor(p, uid, gid)
}

// mkdirAllOwned is os.MkdirAll giving each directory it creates the requested owner, as envd's EnsureDirs does: a
// user's write of a/b/c.txt makes a and b theirs, not root's (they could not create anything in them otherwise).
func mkdirAllOwned(p string, mode os.FileMode, uid, gid *int) error {
	var missing []string
	for d := p; d != "/" && d != "."; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !os.IsNotExist(err) {
			break
		}
		missing = append(missing, d)
	}
	if err := os.MkdirAll(p, mode); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := chownFor(missing[i], uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// chownFor gives a file or directory the host's requested owner (a sandbox user's upload or mkdir); -1 keeps a side.
func chownFor(p string, uid, gid *int) error {
	if uid == nil && gid == nil {
		return nil
	}
	u, g := -1, -1
	if uid != nil {
		u = *uid
	}
	if gid != nil {
		g = *gid
	}
	return os.Lchown(p, u, g)
}

func fileMove(from, to string) error {
	if err := checkPath(from); err != nil {
		return err
	}
	if err := checkPath(to); err != nil {
		return err
	}
	return os.Rename(from, to)
}

func fileRemove(p string, recursive bool) error {
	if err := checkPath(p); err != nil {
		return err
	}
	if p == "/" {
		return newOpError("EINVAL", "refusing to remove /")
	}
	if _, err := os.Lstat(p); err != nil {
		return err
	}
	if recursive {
		return os.RemoveAll(p)
	}
	return os.Remove(p)
}

// fileRead streams a file as OUT frames, within the stream's credit. It is registered as a stream so WINDOW
// frames and cancel find it; the reading runs in its own goroutine.
func (s *session) fileRead(id uint32, req *Request) {
	if err := checkPath(req.Path); err != nil {
		s.reply(id, nil, err)
		return
	}
	cancelled := make(chan struct{})
	var once sync.Once
	st := &stream{out: s.newOutCredit()}
	st.cancel = func() {
		once.Do(func() {
			close(cancelled)
			st.out.release()
		})
	}
	if err := s.register(id, st); err != nil {
		s.reply(id, nil, err)
		return
	}
	go func() {
		res, err := s.sendFile(id, req, st.out, cancelled)
		s.reply(id, res, err)
	}()
}

func (s *session) sendFile(id uint32, req *Request, credit *outCredit, cancelled <-chan struct{}) (map[string]any, error) {
	f, err := os.Open(req.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, newOpError("EISDIR", req.Path+" is a directory")
	}
	var r io.Reader = f
	if req.Offset > 0 {
		if _, err := f.Seek(req.Offset, io.SeekStart); err != nil {
			return nil, err
		}
	}
	if req.Length > 0 {
		r = io.LimitReader(f, req.Length)
	}
	buf := make([]byte, 256<<10)
	var total int64
	for {
		k := credit.take(len(buf), s.done)
		select {
		case <-cancelled:
			return nil, newOpError("ECANCELED", "read cancelled")
		default:
		}
		n, err := r.Read(buf[:k])
		credit.refund(k - n)
		if n > 0 {
			if !s.send(TOut, id, append([]byte(nil), buf[:n]...)) {
				return nil, newOpError("ECANCELED", "session ended")
			}
			total += int64(n)
		}
		if err == io.EOF {
			return map[string]any{"size": total}, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// fileWrite: the host streams TIn frames for this id, then an empty frame (EOF).
func (s *session) fileWrite(id uint32, req *Request) {
	if err := checkPath(req.Path); err != nil {
		s.reply(id, nil, err)
		return
	}
	if req.Parents {
		if err := mkdirAllOwned(filepath.Dir(req.Path), 0o755, req.UID, req.GID); err != nil {
			s.reply(id, nil, err)
			return
		}
	}
	mode := os.FileMode(0o644)
	if req.Mode != 0 {
		mode = os.FileMode(req.Mode)
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if req.Append {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	f, err := os.OpenFile(req.Path, flags, mode)
	if err == nil {
		if err = chownFor(req.Path, req.UID, req.GID); err != nil {
			f.Close()
		}
	}
	if err != nil {
		s.reply(id, nil, err)
		return
	}
	cancelled := make(chan struct{})
	var once sync.Once
	st := &stream{in: s.newInbox(id), cancel: func() { once.Do(func() { close(cancelled) }) }}
	if err := s.register(id, st); err != nil {
		f.Close()
		s.reply(id, nil, err)
		return
	}
	go func() {
		defer f.Close()
		defer st.in.close()
		var total int64
		var werr error
		for {
			data, ok := st.in.get(cancelled)
			if !ok {
				if st.in.overran() {
					s.reply(id, nil, newOpError("EPROTO", "upload data past the stream's flow-control window"))
				} else {
					s.reply(id, nil, newOpError("ECANCELED", "write cancelled"))
				}
				return
			}
			if len(data) == 0 {
				res := map[string]any{"size": total}
				if werr == nil && req.Metadata != nil {
					// After the data, as envd does; the answer says what the file now holds (none where its
					// filesystem keeps no attributes).
					werr = writeMetadata(req.Path, req.Metadata)
					if meta := readMetadata(req.Path); werr == nil && meta != nil {
						res["metadata"] = meta
					}
				}
				if cerr := f.Close(); werr == nil {
					werr = cerr
				}
				s.reply(id, res, werr)
				return
			}
			if werr == nil {
				var n int
				n, werr = f.Write(data)
				total += int64(n)
			}
			st.in.consumed(len(data))
		}
	}()
}

// ---- tcp connect to a guest port (port-forward) ----

func (s *session) tcpConnect(id uint32, req *Request) {
	host := req.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if req.Port <= 0 || req.Port > 65535 {
		s.reply(id, nil, newOpError("EINVAL", "port out of range"))
		return
	}
	st := &stream{in: s.newInbox(id), out: s.newOutCredit()}
	var conn net.Conn
	var connMu sync.Mutex
	closed := make(chan struct{})
	var once sync.Once
	st.cancel = func() {
		once.Do(func() {
			close(closed)
			st.in.close()
			st.out.release()
			connMu.Lock()
			if conn != nil {
				conn.Close()
			}
			connMu.Unlock()
		})
	}
	if err := s.register(id, st); err != nil {
		s.reply(id, nil, err)
		return
	}
	go func() {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(req.Port)), 5*time.Second)
		if err != nil {
			s.reply(id, nil, err)
			return
		}
		connMu.Lock()
		conn = c
		connMu.Unlock()
		select {
		case <-closed:
			c.Close()
			s.reply(id, nil, newOpError("ECANCELED", "cancelled"))
			return
		default:
		}
		s.sendJSON(TEvt, id, map[string]any{"type": "connected"})
		go func() {
			for {
				data, ok := st.in.get(closed)
				if !ok {
					return
				}
				if len(data) == 0 {
					if tc, ok := c.(*net.TCPConn); ok {
						_ = tc.CloseWrite()
					}
					continue
				}
				if _, err := c.Write(data); err != nil {
					st.cancel()
					return
				}
				st.in.consumed(len(data))
			}
		}()
		buf := make([]byte, chunk)
		for {
			k := st.out.take(len(buf), s.done)
			n, err := c.Read(buf[:k])
			st.out.refund(k - n)
			if n > 0 {
				if !s.send(TOut, id, append([]byte(nil), buf[:n]...)) {
					break
				}
			}
			if err != nil {
				break
			}
		}
		st.cancel()
		s.reply(id, nil, nil)
	}()
}

// ---- health ----

func health() map[string]any {
	res := map[string]any{}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		res["uptimeMs"] = si.Uptime * 1000
		res["load1"] = float64(si.Loads[0]) / 65536
		res["processes"] = si.Procs
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 2 {
				switch fields[0] {
				case "MemTotal:":
					res["memTotalKiB"], _ = strconv.Atoi(fields[1])
				case "MemAvailable:":
					res["memAvailableKiB"], _ = strconv.Atoi(fields[1])
				case "Cached:":
					res["memCachedKiB"], _ = strconv.Atoi(fields[1])
				}
			}
		}
		f.Close()
	}
	// The root filesystem as the guest's processes see it (the copy-on-write layer over the read-only image).
	var fs syscall.Statfs_t
	if syscall.Statfs("/", &fs) == nil {
		res["diskTotalKiB"] = fs.Blocks * uint64(fs.Bsize) / 1024
		res["diskFreeKiB"] = fs.Bavail * uint64(fs.Bsize) / 1024
	}
	return res
}
