package main

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// verifyChecksums checks every line of dir's SHA256SUMS against the file it
// names and returns the names.
func verifyChecksums(dir string) ([]string, error) {
	f, err := os.Open(filepath.Join(dir, checksumsFile))
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", checksumsFile, err)
	}
	defer func() { _ = f.Close() }()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		want, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(want) != 64 || name != path.Clean(name) || strings.HasPrefix(name, "../") || path.IsAbs(name) {
			return nil, fmt.Errorf("%s: malformed line %q", checksumsFile, sc.Text())
		}
		got, err := fileSHA256(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			return nil, err
		}
		if got != want {
			return nil, fmt.Errorf("%s: sha256 %s, SHA256SUMS says %s", name, got, want)
		}
		names = append(names, name)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", checksumsFile, err)
	}
	return names, nil
}
