package main

// The guest's writable layer as a stream (docs/agent-protocol.md "Writable layer"): what a filesystem-only pause
// keeps of a sandbox (docs/sandboxd-api.md "Filesystem pause"). The root is an overlay of the read-only image
// (lower) and a tmpfs (upper, in the VM's RAM); /init moves that tmpfs to /.sbx/rw so the agent can read the upper
// layer after switch_root. `layer.save` streams the upper layer as a PAX tar; `layer.restore` applies such a stream
// to the merged root of a fresh VM of the same image. Never the upper directory of a mounted overlay: writing there
// is undefined behaviour for overlayfs, while the merged root gives the same result through the filesystem's rules.
//
// The stream is the overlay's own format in a tar: a whiteout (a deleted image file) is a character device 0/0, an
// opaque directory (one whose image contents were replaced wholesale, e.g. `rm -r d; mkdir d`) carries the PAX
// record SBX.opaque=1, and extended attributes are SCHILY.xattr records (the overlay's own trusted.overlay.* are left
// out). The host never unpacks it: it stores the bytes, capped, and feeds them back to the next VM of that sandbox.

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// upperDir is where /init leaves the overlay's upper layer (src/guest/build/assets/init.sh).
const upperDir = "/.sbx/rw/upper"

const paxOpaque = "SBX.opaque"

// layerSkipped: top-level names that are mount points in every VM (the kernel's and the agent's filesystems), whose
// contents are never the tenant's files.
var layerSkipped = map[string]bool{".sbx": true, "proc": true, "sys": true, "dev": true}

func skippedName(rel string) bool {
	top, _, _ := strings.Cut(rel, "/")
	return layerSkipped[top]
}

// keptXattr: the attributes a file's copy keeps: the tenant's (user.*, e2b's metadata under trusted.e2b.*), file
// capabilities, and any other trusted.* but the overlay's own bookkeeping.
func keptXattr(name string) bool {
	switch {
	case strings.HasPrefix(name, "trusted.overlay."):
		return false
	case strings.HasPrefix(name, "user."), strings.HasPrefix(name, "trusted."), name == "security.capability":
		return true
	}
	return false
}

// writeLayer writes the layer under root as a tar to w.
func writeLayer(root string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		if skippedName(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.Format = tar.FormatPAX
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
			hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			hdr.PAXRecords = map[string]string{}
			if names, err := listXattrs(p); err == nil {
				for _, n := range names {
					if v, err := getXattr(p, n); err == nil && keptXattr(n) {
						hdr.PAXRecords["SCHILY.xattr."+n] = string(v)
					}
				}
			}
			if fi.IsDir() {
				if v, err := getXattr(p, "trusted.overlay.opaque"); err == nil && string(v) == "y" {
					hdr.PAXRecords[paxOpaque] = "1"
				}
			}
			if len(hdr.PAXRecords) == 0 {
				hdr.PAXRecords = nil
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		// A file that grew since its header was written is cut at the header's size (a running guest saves).
		_, err = io.Copy(tw, io.LimitReader(f, hdr.Size))
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// isWhiteout: the overlay's mark of a deleted lower file, a character device 0/0.
func isWhiteout(h *tar.Header) bool {
	return h.Typeflag == tar.TypeChar && h.Devmajor == 0 && h.Devminor == 0
}

// applyLayer applies a layer stream to the tree at root (the merged root "/" in the guest; a directory in tests).
func applyLayer(root string, r io.Reader) (int, error) {
	tr := tar.NewReader(r)
	type dirMeta struct {
		path  string
		hdr   *tar.Header
		mtime time.Time
	}
	var dirs []dirMeta
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, err
		}
		rel := filepath.Clean(strings.TrimSuffix(h.Name, "/"))
		if rel == "." || filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			return n, newOpError("EINVAL", fmt.Sprintf("layer entry %q: not a path inside the root", h.Name))
		}
		if skippedName(rel) {
			continue
		}
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return n, err
		}
		fi, lerr := os.Lstat(p)
		exists := lerr == nil
		if isWhiteout(h) {
			if exists {
				if err := os.RemoveAll(p); err != nil {
					return n, err
				}
			}
			n++
			continue
		}
		// Anything but a directory kept as a directory replaces what is there.
		if exists && !(h.Typeflag == tar.TypeDir && fi.IsDir()) {
			if err := os.RemoveAll(p); err != nil {
				return n, err
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if exists && fi.IsDir() && h.PAXRecords[paxOpaque] == "1" {
				if err := clearDir(p); err != nil {
					return n, err
				}
			}
			if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return n, err
			}
			dirs = append(dirs, dirMeta{p, h, h.ModTime})
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
			if err != nil {
				return n, err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return n, err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				return n, err
			}
		case tar.TypeFifo:
			if err := syscall.Mkfifo(p, uint32(h.Mode&0o7777)); err != nil {
				return n, err
			}
		case tar.TypeChar, tar.TypeBlock:
			mode := uint32(syscall.S_IFCHR)
			if h.Typeflag == tar.TypeBlock {
				mode = syscall.S_IFBLK
			}
			dev := int((h.Devmajor&0xfff)<<8 | (h.Devminor & 0xff) | (h.Devminor&^0xff)<<12)
			if err := syscall.Mknod(p, mode|uint32(h.Mode&0o7777), dev); err != nil {
				return n, err
			}
		default:
			return n, newOpError("EINVAL", fmt.Sprintf("layer entry %q: unsupported type %q", h.Name, h.Typeflag))
		}
		n++
		if h.Typeflag != tar.TypeDir {
			if err := setMeta(p, h); err != nil {
				return n, err
			}
		}
	}
	// Directories last and deepest first: creating their entries above changed their mtimes.
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i].path) > len(dirs[j].path) })
	for _, d := range dirs {
		if err := setMeta(d.path, d.hdr); err != nil {
			return n, err
		}
	}
	return n, nil
}

// clearDir empties a directory (an opaque directory hides everything the image had there).
func clearDir(p string) error {
	des, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	for _, de := range des {
		if err := os.RemoveAll(filepath.Join(p, de.Name())); err != nil {
			return err
		}
	}
	return nil
}

// setMeta gives an entry its owner, mode, attributes and mtime (a symlink its owner only).
func setMeta(p string, h *tar.Header) error {
	if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
		return err
	}
	if h.Typeflag == tar.TypeSymlink {
		return nil
	}
	// After chown, which clears set-id bits.
	if err := os.Chmod(p, os.FileMode(h.Mode&0o777)|setIDBits(h.Mode)); err != nil {
		return err
	}
	for k, v := range h.PAXRecords {
		if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok && keptXattr(name) {
			if err := syscall.Setxattr(p, name, []byte(v), 0); err != nil && !xattrUnsupported(err) {
				return fmt.Errorf("xattr %s of %s: %w", name, p, err)
			}
		}
	}
	return os.Chtimes(p, h.ModTime, h.ModTime)
}

func setIDBits(mode int64) os.FileMode {
	var m os.FileMode
	if mode&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}

// layerSave streams the upper layer as OUT frames within the stream's credit (as file.read does).
func (s *session) layerSave(id uint32) {
	if fi, err := os.Stat(upperDir); err != nil || !fi.IsDir() {
		s.reply(id, nil, newOpError("ENOTSUP", "this guest has no overlay upper layer at "+upperDir+
			" (an image without a read-only root, or an initramfs older than the layer feature)"))
		return
	}
	pr, pw := io.Pipe()
	var once sync.Once
	st := &stream{out: s.newOutCredit()}
	st.cancel = func() {
		once.Do(func() {
			pr.CloseWithError(newOpError("ECANCELED", "save cancelled"))
			st.out.release()
		})
	}
	if err := s.register(id, st); err != nil {
		s.reply(id, nil, err)
		return
	}
	go func() { pw.CloseWithError(writeLayer(upperDir, pw)) }()
	go func() {
		buf := make([]byte, 256<<10)
		var total int64
		for {
			k := st.out.take(len(buf), s.done)
			n, err := pr.Read(buf[:k])
			st.out.refund(k - n)
			if n > 0 {
				if !s.send(TOut, id, append([]byte(nil), buf[:n]...)) {
					pr.CloseWithError(io.ErrClosedPipe)
					s.reply(id, nil, newOpError("ECANCELED", "session ended"))
					return
				}
				total += int64(n)
			}
			if err == io.EOF {
				s.reply(id, map[string]any{"size": total}, nil)
				return
			}
			if err != nil {
				pr.CloseWithError(err)
				s.reply(id, nil, err)
				return
			}
		}
	}()
}

// layerRestore applies a layer the host streams as IN frames (then an empty frame) to the merged root.
func (s *session) layerRestore(id uint32) {
	cancelled := make(chan struct{})
	var once sync.Once
	st := &stream{in: s.newInbox(id), cancel: func() { once.Do(func() { close(cancelled) }) }}
	if err := s.register(id, st); err != nil {
		s.reply(id, nil, err)
		return
	}
	pr, pw := io.Pipe()
	type result struct {
		n   int
		err error
	}
	applied := make(chan result, 1)
	go func() {
		n, err := applyLayer("/", pr)
		// Drain what is left so the feeder below never blocks on a stream that failed midway.
		pr.CloseWithError(io.ErrClosedPipe)
		applied <- result{n, err}
	}()
	go func() {
		defer st.in.close()
		var total int64
		for {
			data, ok := st.in.get(cancelled)
			if !ok {
				msg := "restore cancelled"
				if st.in.overran() {
					msg = "layer data past the stream's flow-control window"
				}
				pw.CloseWithError(newOpError("ECANCELED", msg))
				r := <-applied
				if r.err == nil {
					r.err = newOpError("ECANCELED", msg)
				}
				s.reply(id, nil, r.err)
				return
			}
			if len(data) == 0 {
				pw.Close()
				r := <-applied
				if r.err != nil {
					s.reply(id, nil, r.err)
				} else {
					s.reply(id, map[string]any{"size": total, "entries": r.n}, nil)
				}
				return
			}
			// A failed apply closed the reader: the rest is consumed and dropped until the host's EOF.
			_, _ = pw.Write(data)
			total += int64(len(data))
			st.in.consumed(len(data))
		}
	}()
}
