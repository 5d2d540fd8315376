package main

// File metadata as e2b's envd keeps it (envd 0.6.2): user-defined key/value pairs stored with the file as extended
// attributes `user.e2b.<key>`, so they follow the file through renames and go with it. The guest's writable root is
// an overlay whose upper layer is a tmpfs, and tmpfs takes `user.*` attributes only from Linux 6.6 on (the guest
// kernel is 6.1): where `user.*` is refused the pairs are kept as `trusted.e2b.<key>` instead, which tmpfs has
// always taken and which only root (the agent) may read or write. Reads take both; `user.e2b.` wins a clash.

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"unicode/utf8"
)

const (
	metaUserPrefix    = "user.e2b."
	metaTrustedPrefix = "trusted.e2b."
	// maxMetaKeyLen and maxMetaTotal are e2b's limits (a key fits a 255-byte xattr name with `user.e2b.`; all pairs of
	// a file fit one 4 KiB ext4 block): a write past them is refused, and a read reports no more than that.
	maxMetaKeyLen = 255 - len(metaUserPrefix)
	maxMetaTotal  = 4096
)

// validateMetadata refuses what e2b's envd refuses: empty or over-long keys, bytes outside printable US-ASCII, and
// a set larger than maxMetaTotal (counted as e2b counts it: prefix, key and value of each pair).
func validateMetadata(meta map[string]string) error {
	total := 0
	for k, v := range meta {
		if k == "" {
			return newOpError("EINVAL", "metadata key must not be empty")
		}
		if len(k) > maxMetaKeyLen {
			return newOpError("EINVAL", fmt.Sprintf("metadata key %q exceeds %d bytes", k, maxMetaKeyLen))
		}
		if !printableASCII(k) || !printableASCII(v) {
			return newOpError("EINVAL", fmt.Sprintf("metadata key %q or its value is not printable US-ASCII", k))
		}
		total += len(metaUserPrefix) + len(k) + len(v)
	}
	if total > maxMetaTotal {
		return newOpError("EINVAL", fmt.Sprintf("metadata of %d bytes exceeds %d", total, maxMetaTotal))
	}
	return nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func xattrUnsupported(err error) bool {
	return errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EOPNOTSUPP)
}

// listXattrs names the extended attributes of p (following a symlink, as e2b's reads do).
func listXattrs(p string) ([]string, error) {
	for {
		n, err := syscall.Listxattr(p, nil)
		if err != nil || n == 0 {
			return nil, err
		}
		buf := make([]byte, n)
		n, err = syscall.Listxattr(p, buf)
		if errors.Is(err, syscall.ERANGE) {
			continue // grew between the two calls
		}
		if err != nil {
			return nil, err
		}
		var names []string
		for _, name := range strings.Split(string(buf[:n]), "\x00") {
			if name != "" {
				names = append(names, name)
			}
		}
		return names, nil
	}
}

func getXattr(p, name string) ([]byte, error) {
	for {
		n, err := syscall.Getxattr(p, name, nil)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		n, err = syscall.Getxattr(p, name, buf)
		if errors.Is(err, syscall.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// metaKey is the metadata key an attribute name holds, if it holds one.
func metaKey(name string) (string, bool) {
	if k, ok := strings.CutPrefix(name, metaUserPrefix); ok {
		return k, true
	}
	return strings.CutPrefix(name, metaTrustedPrefix)
}

// readMetadata is the metadata of p; nil when it has none or its filesystem keeps no attributes. Pairs a sandbox
// user set themselves (setfattr) may hold anything: those that are not UTF-8 are skipped (the host's JSON and
// envd's protobuf map need it), and no more than maxMetaTotal bytes are reported, so a listing stays within a frame.
func readMetadata(p string) map[string]string {
	names, err := listXattrs(p)
	if err != nil {
		return nil
	}
	var meta map[string]string
	fromUser := map[string]bool{}
	total := 0
	for _, name := range names {
		k, ok := metaKey(name)
		if !ok || k == "" || !utf8.ValidString(k) {
			continue
		}
		user := strings.HasPrefix(name, metaUserPrefix)
		if _, seen := meta[k]; seen && (fromUser[k] || !user) {
			continue
		}
		v, err := getXattr(p, name)
		if err != nil || !utf8.Valid(v) {
			continue
		}
		if old, seen := meta[k]; seen {
			total -= len(metaUserPrefix) + len(k) + len(old)
		}
		if total+len(metaUserPrefix)+len(k)+len(v) > maxMetaTotal {
			continue
		}
		if meta == nil {
			meta = map[string]string{}
		}
		meta[k] = string(v)
		fromUser[k] = user
		total += len(metaUserPrefix) + len(k) + len(v)
	}
	return meta
}

// writeMetadata makes meta the whole metadata of p, as an e2b upload does (a key the upload does not name is
// removed: O_TRUNC keeps attributes, so an overwritten file would otherwise keep the last upload's). Each pair goes
// to `user.e2b.` where the filesystem takes it, else to `trusted.e2b.`; a filesystem that takes neither (procfs,
// sysfs) keeps none, and that is not an error (e2b's envd logs it and goes on). Attributes are only touched where
// they change, so a file without metadata written without any sees no attribute change (no extra watch event).
func writeMetadata(p string, meta map[string]string) error {
	if err := validateMetadata(meta); err != nil {
		return err
	}
	existing, err := listXattrs(p)
	if err != nil {
		if xattrUnsupported(err) {
			return nil
		}
		return err
	}
	prefix := metaUserPrefix
	for k, v := range meta {
		err := syscall.Setxattr(p, prefix+k, []byte(v), 0)
		if err != nil && prefix == metaUserPrefix && (xattrUnsupported(err) || errors.Is(err, syscall.EPERM)) {
			// tmpfs before 6.6 (ENOTSUP), or a file type that takes no user.* attributes (EPERM).
			prefix = metaTrustedPrefix
			err = syscall.Setxattr(p, prefix+k, []byte(v), 0)
		}
		if err != nil {
			if xattrUnsupported(err) {
				return nil
			}
			return err
		}
	}
	for _, name := range existing {
		k, ok := metaKey(name)
		if !ok {
			continue
		}
		if _, keep := meta[k]; keep && strings.HasPrefix(name, prefix) {
			continue
		}
		if err := syscall.Removexattr(p, name); err != nil && !errors.Is(err, syscall.ENODATA) {
			return err
		}
	}
	return nil
}
