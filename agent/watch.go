package main

// Directory watches: inotify in the guest, reported as the events e2b's envd (fsnotify) reports.

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

// ---- directory watch (inotify) ----

func (s *session) fileWatch(id uint32, req *Request) {
	if err := checkPath(req.Path); err != nil {
		s.reply(id, nil, err)
		return
	}
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		s.reply(id, nil, err)
		return
	}
	// The events fsnotify watches (what e2b's envd reports): no IN_CLOSE_WRITE, or one write would be reported
	// twice, as its data and as its close (e2b's SDK tests count CREATE, CHMOD, WRITE for one files.write).
	const mask = syscall.IN_CREATE | syscall.IN_DELETE | syscall.IN_MODIFY |
		syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO | syscall.IN_ATTRIB | syscall.IN_DELETE_SELF
	var mu sync.Mutex
	wds := map[int32]string{}
	add := func(dir string) {
		wd, err := syscall.InotifyAddWatch(fd, dir, mask)
		if err == nil {
			mu.Lock()
			wds[int32(wd)] = dir
			mu.Unlock()
		}
	}
	if fi, err := os.Stat(req.Path); err != nil || !fi.IsDir() {
		syscall.Close(fd)
		if err == nil {
			err = newOpError("ENOTDIR", req.Path+" is not a directory")
		}
		s.reply(id, nil, err)
		return
	}
	if !req.AllowNetworkMounts && onNetworkMount(req.Path) {
		syscall.Close(fd)
		s.reply(id, nil, newOpError("EINVAL", "cannot watch "+req.Path+" on a network filesystem (allowNetworkMounts)"))
		return
	}
	add(req.Path)
	if req.Recursive {
		_ = filepath.Walk(req.Path, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.IsDir() && p != req.Path {
				add(p)
			}
			return nil
		})
	}
	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: registered with the poller, Close unblocks Read
	var once sync.Once
	st := &stream{cancel: func() { once.Do(func() { f.Close() }) }}
	if err := s.register(id, st); err != nil {
		f.Close()
		s.reply(id, nil, err)
		return
	}
	s.sendJSON(TEvt, id, map[string]any{"type": "watching"})
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if err != nil {
				s.reply(id, nil, nil)
				return
			}
			for off := 0; off+syscall.SizeofInotifyEvent <= n; {
				ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
				nameBytes := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
				off += syscall.SizeofInotifyEvent + int(ev.Len)
				name := strings.TrimRight(string(nameBytes), "\x00")
				mu.Lock()
				dir := wds[ev.Wd]
				mu.Unlock()
				p := dir
				if name != "" {
					p = filepath.Join(dir, name)
				}
				var op string
				switch {
				case ev.Mask&syscall.IN_CREATE != 0, ev.Mask&syscall.IN_MOVED_TO != 0:
					op = "create"
					if ev.Mask&syscall.IN_ISDIR != 0 && req.Recursive {
						add(p)
					}
				case ev.Mask&(syscall.IN_DELETE|syscall.IN_DELETE_SELF) != 0:
					op = "remove"
				case ev.Mask&syscall.IN_MOVED_FROM != 0:
					op = "rename"
				case ev.Mask&syscall.IN_MODIFY != 0:
					op = "write"
				case ev.Mask&syscall.IN_ATTRIB != 0:
					op = "chmod"
				default:
					continue
				}
				if !s.sendJSON(TEvt, id, map[string]any{"type": "fs", "op": op, "path": p}) {
					st.cancel()
				}
			}
		}
	}()
}

// The filesystems envd counts as network mounts (Linux's magic numbers), where inotify sees only local changes: a
// watch of one is refused unless the caller allows it (envd 0.6.4's allowNetworkMounts).
const (
	nfsSuperMagic  = 0x6969
	cifsMagic      = 0xFF534D42
	smbSuperMagic  = 0x517B
	smb2Magic      = 0xFE534D42
	fuseSuperMagic = 0x65735546
)

func onNetworkMount(p string) bool {
	var fs syscall.Statfs_t
	if syscall.Statfs(p, &fs) != nil {
		return false
	}
	switch uint32(fs.Type) {
	case nfsSuperMagic, cifsMagic, smbSuperMagic, smb2Magic, fuseSuperMagic:
		return true
	}
	return false
}
