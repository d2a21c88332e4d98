package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// checksumsFile is the release's list of SHA-256 sums, in the format of
// `sha256sum` (so `sha256sum -c SHA256SUMS` checks it from the release
// directory).
const checksumsFile = "SHA256SUMS"

// fileSHA256 returns the hex SHA-256 of a file.
func fileSHA256(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", fmt.Errorf("opening %s: %w", name, err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// summed reports whether SHA256SUMS lists a file of the release (a path
// relative to its directory): every file but the list itself and the blobs
// of the OCI layouts, which are named by their own digest and reached from
// each layout's index.json, which is listed.
func summed(rel string) bool {
	if rel == checksumsFile {
		return false
	}
	parts := strings.Split(rel, "/")
	return !(len(parts) > 3 && parts[0] == "images" && parts[2] == "blobs")
}

// writeChecksums writes SHA256SUMS for the files of the release directory.
func writeChecksums(dir string) error {
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return fmt.Errorf("locating %s: %w", p, err)
		}
		rel = filepath.ToSlash(rel)
		if !summed(rel) {
			return nil
		}
		sum, err := fileSHA256(p)
		if err != nil {
			return err
		}
		lines = append(lines, sum+"  "+rel+"\n")
		return nil
	})
	if err != nil {
		return fmt.Errorf("summing the release: %w", err)
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i][66:] < lines[j][66:] })
	if err := os.WriteFile(filepath.Join(dir, checksumsFile), []byte(strings.Join(lines, "")), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", checksumsFile, err)
	}
	return nil
}
