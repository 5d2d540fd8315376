package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A layer saved from an overlay-style upper directory (a whiteout, an opaque directory, a new file, a symlink)
// applied to a tree standing for the image gives what the overlay showed: files written, deletions applied, the
// opaque directory's image contents gone, modes and owners kept, mount points skipped.
func TestLayerRoundTrip(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (whiteouts are device nodes, opaque marks trusted.* attributes)")
	}
	upper, merged := t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// The image (what the fresh VM's merged root shows before the restore).
	must(os.MkdirAll(filepath.Join(merged, "etc"), 0o755))
	must(os.WriteFile(filepath.Join(merged, "etc/gone.conf"), []byte("image"), 0o644))
	must(os.WriteFile(filepath.Join(merged, "etc/kept.conf"), []byte("image"), 0o644))
	must(os.MkdirAll(filepath.Join(merged, "opt/app"), 0o755))
	must(os.WriteFile(filepath.Join(merged, "opt/app/old"), []byte("image"), 0o644))
	// The upper layer.
	must(os.MkdirAll(filepath.Join(upper, "etc"), 0o755))
	must(syscall.Mknod(filepath.Join(upper, "etc/gone.conf"), syscall.S_IFCHR|0o000, 0))
	must(os.MkdirAll(filepath.Join(upper, "opt/app"), 0o750))
	must(syscall.Setxattr(filepath.Join(upper, "opt/app"), "trusted.overlay.opaque", []byte("y"), 0))
	must(os.WriteFile(filepath.Join(upper, "opt/app/new"), []byte("fresh"), 0o600))
	must(os.MkdirAll(filepath.Join(upper, "root"), 0o700))
	must(os.WriteFile(filepath.Join(upper, "root/notes.txt"), bytes.Repeat([]byte("x"), 300<<10), 0o640))
	must(os.Chown(filepath.Join(upper, "root/notes.txt"), 1000, 1000))
	must(syscall.Setxattr(filepath.Join(upper, "root/notes.txt"), "user.e2b.k", []byte("v"), 0))
	must(os.Symlink("notes.txt", filepath.Join(upper, "root/link")))
	must(os.MkdirAll(filepath.Join(upper, ".sbx/rw"), 0o755))
	must(os.WriteFile(filepath.Join(upper, ".sbx/rw/x"), []byte("agent's"), 0o644))

	var buf bytes.Buffer
	must(writeLayer(upper, &buf))
	if _, err := applyLayer(merged, &buf); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(merged, "etc/gone.conf")); !os.IsNotExist(err) {
		t.Fatalf("whiteout not applied: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(merged, "etc/kept.conf")); string(b) != "image" {
		t.Fatalf("untouched image file changed: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(merged, "opt/app/old")); !os.IsNotExist(err) {
		t.Fatalf("opaque directory kept the image's entry: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(merged, "opt/app/new")); string(b) != "fresh" {
		t.Fatalf("opt/app/new: %q", b)
	}
	fi, err := os.Stat(filepath.Join(merged, "root/notes.txt"))
	must(err)
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Size() != 300<<10 || fi.Mode().Perm() != 0o640 || st.Uid != 1000 || st.Gid != 1000 {
		t.Fatalf("notes.txt: size %d mode %v owner %d:%d", fi.Size(), fi.Mode(), st.Uid, st.Gid)
	}
	if v, err := getXattr(filepath.Join(merged, "root/notes.txt"), "user.e2b.k"); err == nil && string(v) != "v" {
		t.Fatalf("xattr: %q", v)
	}
	if l, _ := os.Readlink(filepath.Join(merged, "root/link")); l != "notes.txt" {
		t.Fatalf("symlink: %q", l)
	}
	if fi, _ := os.Stat(filepath.Join(merged, "opt/app")); fi.Mode().Perm() != 0o750 {
		t.Fatalf("opt/app mode %v", fi.Mode())
	}
	if _, err := os.Lstat(filepath.Join(merged, ".sbx")); !os.IsNotExist(err) {
		t.Fatal("the agent's mount point was restored")
	}
}

// A stream naming a path outside the root is refused before anything is written there.
func TestLayerRefusesEscapes(t *testing.T) {
	root := t.TempDir()
	var buf bytes.Buffer
	if err := newTestTar(&buf, "../escape", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := applyLayer(root, &buf); err == nil {
		t.Fatal("an entry outside the root was accepted")
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(root), "escape")); !os.IsNotExist(err) {
		t.Fatal("escape written")
	}
}

func newTestTar(buf *bytes.Buffer, name, content string) error {
	tw := tar.NewWriter(buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write([]byte(content)); err != nil {
		return err
	}
	return tw.Close()
}
