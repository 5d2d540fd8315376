package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// metaFile is a file in a directory whose filesystem keeps user.* or trusted.* attributes (the test's temp dir, or
// /dev/shm); the test is skipped where neither is kept.
func metaFile(t *testing.T) string {
	t.Helper()
	for _, dir := range []string{t.TempDir(), "/dev/shm"} {
		p := filepath.Join(dir, "meta-"+strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			continue
		}
		t.Cleanup(func() { os.Remove(p) })
		if err := writeMetadata(p, map[string]string{"probe": "1"}); err == nil && readMetadata(p)["probe"] == "1" {
			if err := writeMetadata(p, map[string]string{}); err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Skip("no filesystem here keeps user.* or trusted.* attributes")
	return ""
}

func TestMetadataRoundTripAndReplace(t *testing.T) {
	p := metaFile(t)
	if err := writeMetadata(p, map[string]string{"author": "mish", "purpose": "upload"}); err != nil {
		t.Fatal(err)
	}
	got := readMetadata(p)
	if len(got) != 2 || got["author"] != "mish" || got["purpose"] != "upload" {
		t.Fatalf("after the first write: %v", got)
	}
	// A second upload replaces the set: a key it does not name is gone.
	if err := writeMetadata(p, map[string]string{"author": "other"}); err != nil {
		t.Fatal(err)
	}
	if got := readMetadata(p); len(got) != 1 || got["author"] != "other" {
		t.Fatalf("after the replace: %v", got)
	}
	// An upload without metadata clears it.
	if err := writeMetadata(p, map[string]string{}); err != nil {
		t.Fatal(err)
	}
	if got := readMetadata(p); got != nil {
		t.Fatalf("after the clear: %v", got)
	}
	// It goes with the file, and a symlink reports its target's.
	if err := writeMetadata(p, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	moved := p + ".moved"
	if err := fileMove(p, moved); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(moved) })
	link := p + ".link"
	if err := os.Symlink(moved, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(link) })
	for _, q := range []string{moved, link} {
		st, err := fileStat(q)
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := st["metadata"].(map[string]string); m["k"] != "v" {
			t.Fatalf("stat %s: metadata %v", q, st["metadata"])
		}
	}
}

func TestMetadataValidation(t *testing.T) {
	bad := []map[string]string{
		{"": "v"},
		{strings.Repeat("k", maxMetaKeyLen+1): "v"},
		{"k": "tab\there"},
		{"k\x7f": "v"},
		{"a": strings.Repeat("v", 2000), "b": strings.Repeat("v", 2100)},
	}
	for _, m := range bad {
		if err := writeMetadata("/nonexistent", m); opCode(err) != "EINVAL" {
			t.Errorf("writeMetadata(%q) = %v, want EINVAL", m, err)
		}
	}
	if err := validateMetadata(map[string]string{"ok-key_1": "any printable value ~!"}); err != nil {
		t.Fatal(err)
	}
}

func TestMetadataOnAFilesystemWithoutAttributes(t *testing.T) {
	// procfs keeps no attributes: writing none there is not an error, and nothing is read back.
	if err := writeMetadata("/proc/self/status", map[string]string{"k": "v"}); err != nil && !xattrUnsupported(err) &&
		err != syscall.EACCES && err != syscall.EPERM {
		t.Fatal(err)
	}
	if got := readMetadata("/proc/self/status"); got != nil {
		t.Fatalf("procfs metadata: %v", got)
	}
}

func TestListStaysWithinAFrame(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("n", 200)
	for i := 0; i < 3000; i++ {
		if err := os.WriteFile(filepath.Join(dir, long+string(rune('a'+i%26))+strings.Repeat("0", i%7)+strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := fileList(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(mustJSON(res)); n > MaxPayload {
		t.Fatalf("a listing of %d bytes does not fit a frame", n)
	}
	if res["truncated"] != true {
		t.Fatal("a listing cut short must say so")
	}
}
