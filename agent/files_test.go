package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"testing"
)

// opCode is the error code the host would see for err.
func opCode(err error) string {
	var oe *opError
	if errors.As(err, &oe) {
		return oe.Code
	}
	if err == nil {
		return ""
	}
	return errnoCode(err)
}

func TestPathsMustBeAbsolute(t *testing.T) {
	for _, p := range []string{"", "tmp/x", "./x", "../etc/passwd"} {
		if got := opCode(checkPath(p)); got != "EINVAL" {
			t.Errorf("checkPath(%q) = %q, want EINVAL", p, got)
		}
		if _, err := fileStat(p); opCode(err) != "EINVAL" {
			t.Errorf("fileStat(%q): %v", p, err)
		}
		if err := fileMkdir(p, true, 0, nil, nil); opCode(err) != "EINVAL" {
			t.Errorf("fileMkdir(%q): %v", p, err)
		}
		if err := fileRemove(p, true); opCode(err) != "EINVAL" {
			t.Errorf("fileRemove(%q): %v", p, err)
		}
	}
	if err := checkPath("/tmp/x"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := fileMove(filepath.Join(dir, "a"), "relative"); opCode(err) != "EINVAL" {
		t.Errorf("move to a relative path: %v", err)
	}
}

func TestRemoveRefusesRootAndReportsMissing(t *testing.T) {
	if err := fileRemove("/", true); opCode(err) != "EINVAL" {
		t.Fatalf("removing / : %v", err)
	}
	if err := fileRemove(filepath.Join(t.TempDir(), "missing"), false); opCode(err) != "ENOENT" {
		t.Fatalf("removing a missing path: %v", err)
	}
}

func TestFileOpsOnATree(t *testing.T) {
	dir := t.TempDir()
	if err := fileMkdir(filepath.Join(dir, "a/b"), false, 0, nil, nil); opCode(err) != "ENOENT" {
		t.Fatalf("mkdir without parents: %v", err)
	}
	if err := fileMkdir(filepath.Join(dir, "a/b"), true, 0o700, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := fileMkdir(filepath.Join(dir, "a"), false, 0, nil, nil); opCode(err) != "EEXIST" {
		t.Fatalf("mkdir of an existing dir: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a/b/f"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b/f", filepath.Join(dir, "a/link")); err != nil {
		t.Fatal(err)
	}
	st, err := fileStat(filepath.Join(dir, "a/link"))
	if err != nil || st["type"] != "symlink" || st["target"] != "b/f" {
		t.Fatalf("stat of a symlink (not followed): %v, %v", st, err)
	}
	names := func(depth int) []string {
		res, err := fileList(filepath.Join(dir, "a"), depth)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range res["entries"].([]map[string]any) {
			rel, _ := filepath.Rel(dir, e["path"].(string))
			out = append(out, rel+":"+e["type"].(string))
		}
		sort.Strings(out)
		return out
	}
	if got, want := names(1), []string{"a/b:dir", "a/link:symlink"}; !slices.Equal(got, want) {
		t.Fatalf("depth 1: %v, want %v", got, want)
	}
	if got, want := names(2), []string{"a/b/f:file", "a/b:dir", "a/link:symlink"}; !slices.Equal(got, want) {
		t.Fatalf("depth 2: %v, want %v", got, want)
	}
	if err := fileRemove(filepath.Join(dir, "a"), false); opCode(err) != "ENOTEMPTY" {
		t.Fatalf("non-recursive remove of a full dir: %v", err)
	}
	if err := fileMove(filepath.Join(dir, "a/b/f"), filepath.Join(dir, "g")); err != nil {
		t.Fatal(err)
	}
	if err := fileRemove(filepath.Join(dir, "a"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := fileStat(filepath.Join(dir, "a")); opCode(err) != "ENOENT" {
		t.Fatalf("stat after remove: %v", err)
	}
	if _, err := fileList(filepath.Join(dir, "g"), 1); opCode(err) != "ENOTDIR" {
		t.Fatalf("list of a file: %v", err)
	}
}

func TestParentsCreatedForAUserAreTheirs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	dir := t.TempDir()
	uid, gid := 4242, 4343
	if err := fileMkdir(filepath.Join(dir, "a/b/c"), true, 0, &uid, &gid); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "a/b", "a/b/c"} {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 4242 || st.Gid != 4343 {
			t.Errorf("%s is %d:%d, want 4242:4343", p, st.Uid, st.Gid)
		}
	}
	// What was there already keeps its owner.
	if fi, _ := os.Stat(dir); fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("the existing parent changed owner")
	}
}
